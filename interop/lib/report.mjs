// One line per case and a closing "N passed, N failed" for every interop suite.
//
// A case that differs from upstream on purpose is reported as `deviation` with the section of
// docs/protocol.md §12 that explains it; it counts as passed, never as skipped.

export class Report {
  constructor(suite) {
    this.suite = suite;
    this.passed = 0;
    this.failed = 0;
    this.deviations = 0;
  }

  async case(name, fn, { timeoutMs = 30000 } = {}) {
    let timer;
    const guard = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`hang guard: no result after ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      const outcome = await Promise.race([fn(), guard]);
      if (outcome && typeof outcome === "object" && outcome.deviation) {
        this.passed += 1;
        this.deviations += 1;
        console.log(`deviation ${this.suite}: ${name} (${outcome.deviation})`);
      } else {
        this.passed += 1;
        console.log(`ok   ${this.suite}: ${name}`);
      }
    } catch (error) {
      this.failed += 1;
      const message = error && error.stack ? error.stack.split("\n").slice(0, 4).join(" | ") : String(error);
      console.log(`FAIL ${this.suite}: ${name}: ${message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  // Prints the closing line and sets the exit code; returns true when nothing failed.
  finish() {
    const extra = this.deviations > 0 ? ` (${this.deviations} documented deviations)` : "";
    console.log(`${this.suite}${extra}:`);
    console.log(`${this.passed} passed, ${this.failed} failed`);
    if (this.failed > 0) process.exitCode = 1;
    return this.failed === 0;
  }
}

// A documented deviation: return this from a case.
export function deviation(section) {
  return { deviation: section };
}
