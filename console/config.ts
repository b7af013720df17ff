import type { ConsoleConfig } from "../shared/console/config.js";

/** The server embeds the console's configuration in the page (shared/api/console.ts). */
export function readConfig(): ConsoleConfig {
  const text = document.getElementById("console-config")?.textContent ?? "";
  return JSON.parse(text) as ConsoleConfig;
}
