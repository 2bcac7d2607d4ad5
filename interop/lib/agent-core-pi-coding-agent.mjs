// pi-coding-agent's `convertToLlm` and its constants, imported from the module file itself: the
// package's CLI entry needs Node 22, and `dist/core/messages.js` is not an exported subpath, but
// the module imports nothing that Node 20 lacks.

// interop/lib/ → interop/node_modules/ (where interop/package.json installs it).
const messagesUrl = new URL("../node_modules/@earendil-works/pi-coding-agent/dist/core/messages.js", import.meta.url)
  .href;

const messages = await import(messagesUrl);

export const {
  convertToLlm,
  bashExecutionToText,
  BRANCH_SUMMARY_PREFIX,
  BRANCH_SUMMARY_SUFFIX,
  COMPACTION_SUMMARY_PREFIX,
  COMPACTION_SUMMARY_SUFFIX,
} = messages;
