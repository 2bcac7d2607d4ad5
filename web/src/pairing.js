// Who this browser is, as the host's HTTP surface says: a one-time code in the fragment
// (`#pair=CODE`) is traded for the cookie with `POST /pair`; otherwise `GET /me` asks what
// the cookie (if any) names. The code is taken out of the address bar before anything else
// happens, so it is neither in the history nor shown to anyone looking at the screen. Both
// answers also name the server id the page's client must expect in the host's `hello`.

/** @typedef {{tokenId: string, role: string, session: string | null, serverId: string}} Identity */

/** The code in a `#pair=CODE` fragment, or undefined. */
export function pairingCode(hash) {
  const match = /^#pair=([^&]+)$/.exec(hash);
  if (!match) return undefined;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return undefined;
  }
}

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return {};
  }
}

/**
 * Resolves with `{identity}`, or without one: `{refused: "<one line>"}` when the host said
 * why (a used or expired link), `{}` when this browser simply is not paired.
 * @returns {Promise<{identity?: Identity, refused?: string, paired?: boolean}>}
 */
export async function identify() {
  const code = pairingCode(location.hash);
  if (code !== undefined) {
    history.replaceState(history.state, "", location.pathname + location.search);
    const response = await fetch("/pair", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code }),
      credentials: "same-origin",
      cache: "no-store",
    });
    const body = await readJson(response);
    if (response.ok) return { identity: body, paired: true };
    // A used or expired link: the browser may still hold a cookie from before.
    const me = await whoAmI();
    if (me.identity) return me;
    return { refused: body.error ?? `pairing refused (${response.status})` };
  }
  return whoAmI();
}

/**
 * `GET /me`: `{identity}` for a valid cookie; `{}` for none (401: no cookie, or one that was
 * revoked); `{refused}` when the host refused the request itself.
 */
export async function whoAmI() {
  const response = await fetch("/me", { credentials: "same-origin", cache: "no-store" });
  const body = await readJson(response);
  if (response.ok) return { identity: body };
  if (response.status === 401) return {};
  return { refused: body.error ?? `refused (${response.status})` };
}
