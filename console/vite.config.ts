// The console's build: two pages (the app and the login form), fixed file names (the server
// embeds dist/ by name with include_bytes!, decision 0025), no inline script or style (the
// server's Content-Security-Policy allows neither), deterministic output (CI rebuilds dist/
// and checks it is unchanged).
import { defineConfig } from "vitest/config";

export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    rollupOptions: {
      input: { index: "index.html", login: "login.html" },
      output: {
        entryFileNames: "assets/[name].js",
        chunkFileNames: "assets/[name].js",
        assetFileNames: "assets/[name][extname]",
      },
    },
  },
  test: { include: ["src/**/*.test.ts"] },
});
