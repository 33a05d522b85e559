/**
 * EndpointSlice events -> target changes (SPEC §3): each slice is parsed with rules 1–4,
 * merged by the slice index (rule 5), and the winner of every affected identity is staged in
 * the snapshot store (rule 6). A list replaces everything at once, so a relist is never seen
 * half-applied. No I/O: the Kubernetes adapter feeds it, and so does the snapshot benchmark.
 */
import { parseEndpointSlice, type SkipReason } from './endpoint-slice.ts'
import { IndexedSliceEvents } from './slice-events.ts'
import type { SnapshotStore } from './snapshot-store.ts'
import type { PodEndpoint, PortNames } from './types.ts'

export interface SliceTargetsOptions {
  readonly store: SnapshotStore
  readonly ports: PortNames
  /** Reported once per slice event that skipped something (metrics and a log line). */
  readonly onSkipped?: (slice: string, reasons: readonly SkipReason[]) => void
}

export class SliceTargets extends IndexedSliceEvents<PodEndpoint> {
  constructor (options: SliceTargetsOptions) {
    const { store, ports, onSkipped } = options
    super({
      parse: (slice, key) => {
        const parsed = parseEndpointSlice(slice, ports)
        if (parsed.skipped.length > 0) onSkipped?.(key, parsed.skipped)
        return parsed
      },
      onUnnamed: () => { onSkipped?.('(unnamed)', ['malformed_slice']) },
      onChanged: (identities, index, listed) => {
        for (const identity of identities) store.stageEndpoint(identity, index.winner(identity))
        if (listed) store.markInitialized()
      },
    })
  }
}
