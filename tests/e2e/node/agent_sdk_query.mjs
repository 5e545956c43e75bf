// Drives fugu with Claude's TypeScript Agent SDK, as a program written for Claude Code would:
// `node agent_sdk_query.mjs PROMPT OPTIONS_JSON`, the SDK's folder in FUGU_TEST_NODE_MODULES.
// Prints every message the SDK yields as one JSON line; an error as {"error": message}, then exit 1.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.FUGU_TEST_NODE_MODULES;
const sdk = await import(pathToFileURL(join(modules, '@anthropic-ai/claude-agent-sdk', 'sdk.mjs')).href);
const [prompt, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson);
const stderr = [];
options.stderr = (text) => stderr.push(text);
try {
  for await (const message of sdk.query({ prompt, options })) {
    console.log(JSON.stringify(message));
  }
} catch (error) {
  console.log(JSON.stringify({ error: String(error.message ?? error), stderr: stderr.join('') }));
  process.exit(1);
}
