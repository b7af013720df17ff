import { vi } from "vitest";

/**
 * The `services` files share their worker's process (`isolate: false` in vitest.config.ts), so that
 * the AWS SDK, undici, zod and the rest load once per process instead of once per file. Vitest runs
 * this before each of those files and forgets every module it evaluated (ours: shared/, functions/,
 * infra/, test/support/), so each file imports its own fresh copies, as it did in a process of its
 * own: the Lambda handlers build their engine when first imported, for the tables of the file that
 * imports them, and no file sees another's caches or counters. Only node_modules, which vitest
 * leaves to Node's loader, stays loaded.
 */
vi.resetModules();
