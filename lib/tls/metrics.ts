/**
 * TLS reload metrics (SPEC §8). Field names are those RouterMetrics carries
 * (`RouterMetrics extends TlsMetrics`, spread in by createMetrics).
 */
import { counter, gauge, metricGroup } from '../metrics/define.ts'
import { MATERIAL_TYPES, type MaterialType } from './types.ts'

const TLS_RELOAD_RESULTS = ['success', 'rejected'] as const

export const createTlsMetrics = metricGroup({
  tlsReloads: counter(
    'tls_reloads_total',
    'TLS material reloads by material type and result (a rejected generation keeps the last-known-good material)',
    { material_type: MATERIAL_TYPES, result: TLS_RELOAD_RESULTS }),
  // Rejection reasons are counted as they happen, so no reason series exists up front.
  tlsReloadRejections: counter(
    'tls_reload_rejections_total',
    'Rejected TLS material generations by material type and reason, counted once per distinct content',
    { material_type: MATERIAL_TYPES, reason: [] }),
  // Absent until material is active (setCertificateExpiry), so no series up front.
  tlsCertificateExpiry: gauge(
    'tls_certificate_expiry_seconds',
    'Unix time (seconds) of the earliest notAfter in the active TLS material; absent for material that is not mounted',
    { material_type: [] }),
})

export type TlsMetrics = ReturnType<typeof createTlsMetrics>

/** Sets the expiry gauge for active material, or removes the series when there is none. */
export function setCertificateExpiry (metrics: TlsMetrics, material: MaterialType, notAfter: Date | null): void {
  if (notAfter === null) metrics.tlsCertificateExpiry.remove({ material_type: material })
  else metrics.tlsCertificateExpiry.set({ material_type: material }, Math.floor(notAfter.getTime() / 1000))
}
