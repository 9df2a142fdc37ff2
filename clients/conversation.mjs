// Shared driver of the client scripts: reads a conversation spec as JSON on
// stdin, plays the conversations turn by turn (turn 0 of every conversation,
// then turn 1, ...), appending each answer to its conversation's history, and
// prints one JSON line per turn on stdout.
//
// Spec:
//
//	{
//	  "baseURL": "https://localhost:8443",  // the Caddy site
//	  "stream": true,                        // stream the responses or not
//	  "model": "sim-model",
//	  "maxTokens": 12,
//	  "upstreamHeader": "X-Upstream",        // names the engine that answered
//	  "conversations": [{"system": "...", "user": ["turn 0", "turn 1"]}]
//	}
//
// Output line, one per turn:
//
//	{"conversation":0,"turn":1,"upstream":"127.0.0.1:40001","text":"...",
//	 "chunks":12,"finish":"length","usage":{"promptTokens":90,
//	 "completionTokens":12,"cachedTokens":64}}
//
// chunks counts the streamed events that carried text (0 when not
// streaming). A failed request ends the process with status 1 and the error
// on stderr.

import { text } from 'node:stream/consumers';

export async function readSpec() {
  const spec = JSON.parse(await text(process.stdin));
  for (const field of ['baseURL', 'model', 'maxTokens', 'upstreamHeader', 'conversations']) {
    if (spec[field] === undefined) {
      throw new Error(`spec has no ${field}`);
    }
  }
  return spec;
}

// play calls turn(conversation, history) for each turn, where history is
// the conversation's messages so far ending with the new user message, and
// turn returns {upstream, text, chunks, finish, usage}.
export async function play(spec, turn) {
  const histories = spec.conversations.map(() => []);
  const turns = Math.max(...spec.conversations.map((c) => c.user.length));
  for (let t = 0; t < turns; t++) {
    for (const [c, conv] of spec.conversations.entries()) {
      if (t >= conv.user.length) {
        continue;
      }
      const history = histories[c];
      history.push({ role: 'user', content: conv.user[t] });
      const got = await turn(conv, history);
      history.push({ role: 'assistant', content: got.text });
      process.stdout.write(JSON.stringify({ conversation: c, turn: t, ...got }) + '\n');
    }
  }
}

// main runs run, and on failure prints the error with its causes (where a
// TLS failure shows) and exits with status 1.
export function main(run) {
  run().catch((err) => {
    for (let e = err; e; e = e.cause) {
      process.stderr.write(`${e === err ? '' : 'caused by: '}${e?.stack ?? e}${e?.code ? ` (${e.code})` : ''}\n`);
    }
    process.exit(1);
  });
}
