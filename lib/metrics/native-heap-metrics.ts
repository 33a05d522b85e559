/**
 * Metrics of malloc's heap and the trims that give its free pages back (lib/native-heap-trim.ts).
 */
import { counter, gauge, metricGroup } from './define.ts'

export const createNativeHeapMetrics = metricGroup({
  trims: counter('native_heap_trims_total', 'Times the router gave malloc\'s free pages back to the kernel (malloc_trim), each after resident memory neither allocated nor V8\'s heap had grown by --native-heap-trim-threshold-bytes, as after a wave of connections closed'),
  releasedBytes: counter('native_heap_released_bytes_total', 'RSS those trims gave back, bytes'),
  heapBytes: gauge('native_heap_bytes', 'The process\'s native memory as of the last check (every --native-heap-check-interval-ms), by state (in_use: allocated by malloc; idle: resident but neither allocated nor V8\'s heap: free malloc pages, the binary, libraries and stacks)', { state: ['in_use', 'idle'] }),
})

export type NativeHeapMetrics = ReturnType<typeof createNativeHeapMetrics>
