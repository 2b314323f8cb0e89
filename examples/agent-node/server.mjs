// Runs the example agent: node examples/agent-node/server.mjs
//   AGENT_SECRET  shared secret (required; the gateway's AGENT_SECRET)
//   PORT          listen port on 127.0.0.1 (default 8787)
//   AGENT_FORMAT  sse (default) or ndjson
//   AGENT_DELAY_MS pause between deltas (default 50; the first delta comes at once)
import { createAgent } from "./agent.mjs";

const secret = process.env.AGENT_SECRET;
if (!secret) {
  console.error("AGENT_SECRET is required (the same value as the gateway's AGENT_SECRET)");
  process.exit(2);
}
const port = Number(process.env.PORT || 8787);
const server = createAgent({
  secret,
  format: process.env.AGENT_FORMAT === "ndjson" ? "ndjson" : "sse",
  delayMs: Number(process.env.AGENT_DELAY_MS ?? 50),
  onTurn: ({ request, signature }) =>
    console.log(JSON.stringify({ msg: "turn", session: request?.session, turn: request?.turn, attempt: request?.attempt, answers: request?.answer?.interrupt?.id, refused: signature })),
  onClose: ({ request }) => console.log(JSON.stringify({ msg: "closed by relay", session: request.session, turn: request.turn })),
});
server.listen(port, "127.0.0.1", () => console.log(JSON.stringify({ msg: "agent listening", url: `http://127.0.0.1:${port}/` })));
