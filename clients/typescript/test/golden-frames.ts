/**
 * The golden frames of protocol/tests/golden-*.txt: one frame per line, `name | hex | meaning`,
 * `#` comments. Every golden test of this client reads them here.
 */

import { readFileSync } from "node:fs";
import path from "node:path";

import { REPO_ROOT } from "./server.js";

/** The frames of `files` (in protocol/tests/) by name; a name defined twice is an error. */
export function goldenFrames(...files: string[]): Map<string, Uint8Array> {
  const frames = new Map<string, Uint8Array>();
  for (const file of files) {
    const text = readFileSync(path.join(REPO_ROOT, "protocol", "tests", file), "utf8");
    for (const line of text.split("\n")) {
      if (line.trim() === "" || line.startsWith("#")) continue;
      const [name, hex] = line.split("|").map((part) => part.trim());
      if (name === undefined || hex === undefined || name === "") throw new Error(`protocol/tests/${file}: a line without NAME | HEX: ${JSON.stringify(line)}`);
      if (frames.has(name)) throw new Error(`protocol/tests/${file}: golden frame ${name} defined twice`);
      frames.set(name, Uint8Array.from(Buffer.from(hex, "hex")));
    }
  }
  return frames;
}
