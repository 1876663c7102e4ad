// Vite builds the page into $DASHBOARD_OUT (build.sh sets it: build/www/dashboard/),
// served by the gateway at /dashboard/ from SANDGATE_WWW_DIR/dashboard.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/dashboard/",
  build: {
    outDir: process.env.DASHBOARD_OUT || "dist",
    emptyOutDir: true,
    // nothing inline: the page's Content-Security-Policy allows only its own files
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    reportCompressedSize: false,
  },
});
