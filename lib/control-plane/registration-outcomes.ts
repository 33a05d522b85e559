/** Bounded outcome labels of registration stream metrics (issue 3). */
export const REGISTRATION_OUTCOMES = ['forwarded', 'invalid_argument', 'target_unavailable', 'connect_error', 'upstream_reset', 'drained'] as const
export type RegistrationOutcome = typeof REGISTRATION_OUTCOMES[number]
