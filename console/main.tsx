import "./console.css";
import { render } from "preact";
import { App } from "./app.js";
import { readConfig } from "./config.js";

const root = document.getElementById("app");
if (root) {
  root.textContent = "";
  render(<App config={readConfig()} />, root);
}
