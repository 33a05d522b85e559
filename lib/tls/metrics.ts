/**
 * TLS reload metrics (SPEC §8). Field names are those RouterMetrics will carry when these move
 * into lib/metrics/metrics.ts (`RouterMetrics extends TlsMetrics`, or the three fields copied).
 */
import { Counter, Gauge, type Registry } from 'prom-client'
import { MATERIAL_TYPES, type MaterialType } from './types.ts'

const PREFIX = 'stargate_k8s_router_'

const TLS_RELOAD_RESULTS = ['success', 'rejected'] as const

export interface TlsMetrics {
  readonly tlsReloads: Counter<'material_type' | 'result'>
  readonly tlsReloadRejections: Counter<'material_type' | 'reason'>
  readonly tlsCertificateExpiry: Gauge<'material_type'>
}

export function createTlsMetrics (registry: Registry): TlsMetrics {
  const registers = [registry]
  const metrics: TlsMetrics = {
    tlsReloads: new Counter({
      name: PREFIX + 'tls_reloads_total',
      help: 'TLS material reloads by material type and result (a rejected generation keeps the last-known-good material)',
      labelNames: ['material_type', 'result'] as const,
      registers,
    }),
    tlsReloadRejections: new Counter({
      name: PREFIX + 'tls_reload_rejections_total',
      help: 'Rejected TLS material generations by material type and reason, counted once per distinct content',
      labelNames: ['material_type', 'reason'] as const,
      registers,
    }),
    tlsCertificateExpiry: new Gauge({
      name: PREFIX + 'tls_certificate_expiry_seconds',
      help: 'Unix time (seconds) of the earliest notAfter in the active TLS material; absent for material that is not mounted',
      labelNames: ['material_type'] as const,
      registers,
    }),
  }
  for (const material of MATERIAL_TYPES) {
    for (const result of TLS_RELOAD_RESULTS) metrics.tlsReloads.inc({ material_type: material, result }, 0)
  }
  return metrics
}

/** Sets the expiry gauge for active material, or removes the series when there is none. */
export function setCertificateExpiry (metrics: TlsMetrics, material: MaterialType, notAfter: Date | null): void {
  if (notAfter === null) metrics.tlsCertificateExpiry.remove({ material_type: material })
  else metrics.tlsCertificateExpiry.set({ material_type: material }, Math.floor(notAfter.getTime() / 1000))
}
