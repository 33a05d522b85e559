/**
 * The HTTP/2 SETTINGS of WebTransport over HTTP/2 (draft-ietf-webtrans-http2 §11.2), what the
 * relay advertises on each leg: per hop, but with capsules forwarded end to end
 * (lib/quic/h3/capsule.ts) the endpoints' flow control is end to end.
 *
 * The initial flow-control credit and stream limits of sessions on a connection: the relay
 * advertises to Pylons the values the library's endpoints use by default (what Stargate pods
 * advertise, unless configured otherwise), and to a pod the values the Pylon advertised.
 */
export const WT_SETTINGS = {
  initialMaxData: 0x2b61,
  initialMaxStreamDataUni: 0x2b62,
  initialMaxStreamDataBidi: 0x2b63,
  initialMaxStreamsUni: 0x2b64,
  initialMaxStreamsBidi: 0x2b65,
} as const
export const WT_SETTING_IDS: number[] = Object.values(WT_SETTINGS)
/** @fails-components/webtransport's defaults (16 KiB of credit, 100 streams each way). */
export const DEFAULT_WT_SETTINGS: Readonly<Record<number, number>> = Object.freeze({
  [WT_SETTINGS.initialMaxData]: 16 * 1024,
  [WT_SETTINGS.initialMaxStreamDataUni]: 16 * 1024,
  [WT_SETTINGS.initialMaxStreamDataBidi]: 16 * 1024,
  [WT_SETTINGS.initialMaxStreamsUni]: 100,
  [WT_SETTINGS.initialMaxStreamsBidi]: 100,
})

/** The WebTransport settings among a peer's custom settings; null when it sent none. */
export function pickWtSettings (custom: Readonly<Record<number, number>> | undefined): Record<number, number> | null {
  if (custom === undefined) return null
  let found: Record<number, number> | null = null
  for (const id of WT_SETTING_IDS) {
    const value = custom[id]
    if (typeof value === 'number') (found ??= {})[id] = value
  }
  return found
}
