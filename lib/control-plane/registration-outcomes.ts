/** Bounded outcome labels of registration stream metrics (issue 3; invalid_response: issue 14). */
export const REGISTRATION_OUTCOMES = ['forwarded', 'invalid_argument', 'target_unavailable', 'connect_error', 'upstream_reset', 'drained', 'invalid_response'] as const
export type RegistrationOutcome = typeof REGISTRATION_OUTCOMES[number]
