/**
 * WebTransport over HTTP/3 needs @fails-components/webtransport's native quiche transport,
 * a separate package that is built from source (about 15 minutes, and BoringSSL, abseil and
 * quiche sources fetched from the internet) where no prebuilt binary fits. Where it does not
 * load, the router serves WebTransport over HTTP/2 only and says so at start-up (SPEC §7).
 */

export const HTTP3_TRANSPORT_MODULE = '@fails-components/webtransport-transport-http3-quiche'

export type Http3Probe =
  | { readonly available: true }
  | { readonly available: false, readonly reason: string }

/** Tries to load the native HTTP/3 transport; never throws. */
export async function probeHttp3Transport (moduleName: string = HTTP3_TRANSPORT_MODULE): Promise<Http3Probe> {
  try {
    await import(moduleName)
    return { available: true }
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    const message = (e.message ?? String(err)).split('\n')[0] ?? ''
    return { available: false, reason: `cannot load ${moduleName}: ${e.code === undefined ? '' : e.code + ': '}${message}` }
  }
}
