import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The machine (and CI's) has 2 cores shared with a server per test file.
    maxWorkers: 2,
    // @langchain/langgraph-checkpoint-validation declares its suites with the global describe/it.
    globals: true,
    // An unhandled rejection anywhere fails the run (vitest's default): the client must not
    // leave one behind, whatever the server does.
    dangerouslyIgnoreUnhandledErrors: false,
  },
});
