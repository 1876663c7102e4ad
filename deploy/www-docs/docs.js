// GET /docs: Swagger UI rendering the gateway's own document (the page's
// data-openapi: GET /openapi.json).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: document.getElementById("swagger-ui").dataset.openapi,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null, // never ask a validator elsewhere
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    persistAuthorization: false,
  });
});
