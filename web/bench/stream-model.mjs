// A model server for the benchmark: OpenAI-compatible Chat Completions on loopback
// (`POST /v1/chat/completions`, server-sent events), streaming a reply of `tokens` one-word
// tokens at `tokensPerSecond`, whatever the prompt. The host reaches it with
// `--model openai:stream --base-url http://127.0.0.1:PORT/v1`, so a reply streams at a rate
// the benchmark sets (the embedded scripted model streams at its own fixed pace).
//
// Tokens are paced against the reply's start (token i leaves at i / rate), not by sleeping a
// fixed step after each write, so the rate holds under load.

import { createServer } from "node:http";

/** @param {{tokensPerSecond: number, tokens: number}} options */
export async function startStreamModel({ tokensPerSecond, tokens }) {
  const server = createServer((req, res) => {
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404).end();
      return;
    }
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-store" });
      const chunk = (body) => res.write(`data: ${JSON.stringify({ id: "bench", object: "chat.completion.chunk", model: "stream", ...body })}\n\n`);
      const started = performance.now();
      let sent = 0;
      let timer;
      const step = () => {
        const due = Math.min(tokens, Math.floor(((performance.now() - started) * tokensPerSecond) / 1000) + 1);
        for (; sent < due; sent += 1) {
          // Words, a paragraph break every 40, a code span now and then: Markdown to render.
          const word = sent % 40 === 39 ? "end.\n\n" : sent % 17 === 0 ? "`code` " : `word${sent} `;
          chunk({ choices: [{ index: 0, delta: { content: word }, finish_reason: null }] });
        }
        if (sent < tokens) {
          timer = setTimeout(step, Math.max(0, started + (sent * 1000) / tokensPerSecond - performance.now()));
          return;
        }
        chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 10, completion_tokens: tokens, total_tokens: tokens + 10 } });
        res.end("data: [DONE]\n\n");
      };
      res.on("close", () => clearTimeout(timer));
      step();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    baseUrl: `http://127.0.0.1:${server.address().port}/v1`,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
