// Upstream's agent core (pi-agent-core 1.6.0 `runAgentLoop`, pi-coding-agent 1.6.0
// `convertToLlm`) beside baton-host's agent loop and projection, driven by the same scripted
// model streams (interop/lib/agent-core-scenarios.mjs) and compared after the name mapping in
// interop/lib/agent-core-compare.mjs.
//
//   node interop/suites/agent-core.mjs      (BATON_AGENT_PROBE, default target/debug/baton-agent-probe)

import assert from "node:assert/strict";
import { deviation, Report } from "../lib/report.mjs";
import { runBaton } from "../lib/agent-core-baton.mjs";
import { compareRuns } from "../lib/agent-core-compare.mjs";
import { projectionCases } from "../lib/agent-core-projection.mjs";
import { scenarios } from "../lib/agent-core-scenarios.mjs";
import { runUpstream } from "../lib/agent-core-upstream.mjs";

const report = new Report("agent-core");

const runs = new Map();
async function both(scenario) {
  if (!runs.has(scenario.name)) {
    runs.set(scenario.name, Promise.all([runUpstream(scenario), runBaton(scenario)]));
  }
  return runs.get(scenario.name);
}

function outcomeCheck(scenario, up, baton) {
  // baton's RunOutcome against what upstream's run ended with
  const models = up.requests.length;
  const lastAssistant = [...up.messages].reverse().find((m) => m.role === "assistant");
  const o = baton.outcome;
  const problems = [];
  const upAbortedExtra = lastAssistant?.stopReason === "aborted" && lastAssistant.content.length === 0 && o.stopReason === "aborted" && o.turns === models - 1;
  if (o.turns !== models && !upAbortedExtra) problems.push(`model calls: upstream ${models}, baton turns ${o.turns}`);
  if (o.stopReason !== lastAssistant?.stopReason && !(o.stopReason === "toolUse" && lastAssistant?.stopReason === "stop")) {
    problems.push(`final stop reason: upstream ${lastAssistant?.stopReason}, baton ${o.stopReason}`);
  }
  const upTerminated = up.messages.at(-1)?.role === "toolResult";
  if (o.terminatedByTools !== upTerminated) problems.push(`terminated by tools: upstream ${upTerminated}, baton ${o.terminatedByTools}`);
  if (problems.length) throw new Error(`${scenario.name}: ${problems.join("; ")}`);
}

// The scenario's own facts, on baton's run (the comparison would not notice both sides being
// wrong the same way).
function expectationCheck(scenario, baton) {
  const x = scenario.expect ?? {};
  const o = baton.outcome;
  if (x.modelCalls !== undefined) assert.equal(o.turns, x.modelCalls, "model calls");
  if (x.stop !== undefined) assert.equal(o.stopReason, x.stop, "final stop reason");
  if (x.terminated !== undefined) assert.equal(o.terminatedByTools, x.terminated, "terminated by tools");
  const ends = baton.events.filter((e) => e.type === "ToolEnd").map((e) => e.result.toolCallId);
  if (x.toolRuns !== undefined) assert.equal(ends.length, x.toolRuns, "tool ends");
  if (scenario.order) {
    // the gates really ordered the batch (and the order is not just the call order)
    assert.deepEqual(ends.filter((id) => scenario.order.includes(id)), scenario.order, "completion order");
  }
}

for (const scenario of scenarios) {
  await report.case(`loop: ${scenario.name}`, async () => {
    const [up, baton] = await both(scenario);
    expectationCheck(scenario, baton);
    const { applied } = compareRuns(up, baton);
    outcomeCheck(scenario, up, baton);
    if (applied.length > 0) return deviation(applied.map((r) => r.reason).join(" + "));
  });
}

await report.case("loop: the streaming partial's stop reason", async () => {
  const [up, baton] = await both(scenarios[0]);
  const upPartial = up.events.find((e) => e.type === "message_start" && e.message.role === "assistant").message;
  const batonPartial = baton.events.find((e) => e.type === "AssistantStart").partial;
  if (upPartial.stopReason === batonPartial.stopReason) return;
  if (upPartial.stopReason === "pending" && batonPartial.stopReason === "stop") {
    return deviation(
      "§agent.partial upstream's streaming partial says stopReason \"pending\"; baton's StopReason has no pending value and its AssistantStart shell says \"stop\" until settled (services publish status: streaming instead)",
    );
  }
  throw new Error(`partial stop reason: upstream ${upPartial.stopReason}, baton ${batonPartial.stopReason}`);
});

for (const { name, fn } of projectionCases()) {
  await report.case(`projection: ${name}`, fn);
}

report.finish();
