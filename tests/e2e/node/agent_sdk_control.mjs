// Drives fugu with Claude's TypeScript Agent SDK in streaming input mode and calls the query's control
// methods once the first answer is in: `node agent_sdk_control.mjs PROMPT OPTIONS_JSON CALLS_JSON`, CALLS
// a list of [method, ...args]; the SDK's folder in FUGU_TEST_NODE_MODULES. Prints every message the SDK
// yields as one JSON line, then one {"call": method, "ok": value} or {"call": method, "error": message}
// per call; an error of the query itself as {"error": message}, then exit 1.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.FUGU_TEST_NODE_MODULES;
const sdk = await import(pathToFileURL(join(modules, '@anthropic-ai/claude-agent-sdk', 'sdk.mjs')).href);
const [prompt, optionsJson, callsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson);
const stderr = [];
options.stderr = (text) => stderr.push(text);
let finish;
const finished = new Promise((resolve) => { finish = resolve; });
async function* input() {
  yield { type: 'user', message: { role: 'user', content: prompt }, parent_tool_use_id: null, session_id: '' };
  await finished;
}
const q = sdk.query({ prompt: input(), options });
try {
  for await (const message of q) {
    console.log(JSON.stringify(message));
    if (message.type === 'result') {
      for (const [method, ...args] of JSON.parse(callsJson)) {
        try {
          const value = await q[method](...args);
          console.log(JSON.stringify({ call: method, ok: value ?? null }));
        } catch (error) {
          console.log(JSON.stringify({ call: method, error: String(error.message ?? error) }));
        }
      }
      finish();
    }
  }
} catch (error) {
  console.log(JSON.stringify({ error: String(error.message ?? error), stderr: stderr.join('') }));
  process.exit(1);
}
