// Validates an OpenAPI document (default: gateway/openapi/openapi.json, what
// GET /openapi.json serves) against the OpenAPI 3.1 schema with
// @seriousme/openapi-schema-validator, every $ref resolved. Exit 0 when valid;
// otherwise the validator's errors on stderr and exit 1.
// Usage: node tests/openapi/validate.mjs [FILE]   (after npm ci in tests/openapi)
import { Validator } from "@seriousme/openapi-schema-validator";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const file = process.argv[2] ?? fileURLToPath(new URL("../../gateway/openapi/openapi.json", import.meta.url));
const doc = JSON.parse(readFileSync(file, "utf8"));
const validator = new Validator();
const res = await validator.validate(doc);
if (validator.version !== "3.1") {
  console.error(`${file}: OpenAPI ${validator.version}, expected 3.1`);
  process.exit(1);
}
if (!res.valid) {
  console.error(`${file}: not a valid OpenAPI 3.1 document:`);
  console.error(JSON.stringify(res.errors, null, 2));
  process.exit(1);
}
// every $ref must point at something (the schema check alone does not follow them)
const missing = [];
const walk = (v) => {
  if (Array.isArray(v)) return v.forEach(walk);
  if (v === null || typeof v !== "object") return;
  if (typeof v.$ref === "string") {
    let at = doc;
    for (const part of v.$ref.replace(/^#\//, "").split("/")) at = at?.[part.replace(/~1/g, "/").replace(/~0/g, "~")];
    if (at === undefined) missing.push(v.$ref);
  }
  Object.values(v).forEach(walk);
};
walk(doc);
if (missing.length) {
  console.error(`${file}: unresolved $ref: ${[...new Set(missing)].join(", ")}`);
  process.exit(1);
}
console.log(`${file}: valid OpenAPI ${validator.version}, ${Object.keys(doc.paths).length} paths`);
