// Reconnect delays: 250 ms doubling to 10 s, each with ±50 % jitter so a host restart does
// not see every tab at the same instant. `cancel()` wakes a waiting `wait()` at once (the
// page does that on `online`, `visibilitychange` and `pageshow`).

const BASE_MS = 250;
const MAX_MS = 10000;

export class Backoff {
  attempts = 0;
  #timer;
  #wake;

  reset() {
    this.attempts = 0;
  }

  delay() {
    const raw = Math.min(MAX_MS, BASE_MS * 2 ** this.attempts);
    return Math.round(raw * (0.5 + Math.random()));
  }

  /** Waits the next delay (or until `cancel()`). */
  wait() {
    this.cancel();
    const ms = this.delay();
    this.attempts += 1;
    return new Promise((resolve) => {
      this.#wake = resolve;
      this.#timer = setTimeout(() => {
        this.#wake = undefined;
        resolve();
      }, ms);
    });
  }

  /** Ends the current wait now. */
  cancel() {
    clearTimeout(this.#timer);
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}
