/** The shortest password accepted. */
export const MIN_PASSWORD_LENGTH = 12;

/** Passwords that appear at the top of every leaked list, and their obvious variants. */
const COMMON = new Set([
  'password',
  'passw0rd',
  'letmein',
  'welcome',
  'qwerty',
  'qwertyuiop',
  'admin',
  'administrator',
  'trainyard',
  'changeme',
  'iloveyou',
  'dragon',
  'monkey',
  'football',
  'baseball',
  'sunshine',
  'princess',
  'starwars',
  'whatever',
  'trustno1',
  '123456',
  '1234567890',
  'abc123',
]);

/** Why a password is refused, or null when it may be used. */
export function passwordProblem(username: string, password: string): string | null {
  if (password.length < MIN_PASSWORD_LENGTH) return `at least ${MIN_PASSWORD_LENGTH} characters`;
  if (password.length > 256) return 'at most 256 characters';
  const lower = password.toLowerCase();
  if (lower.includes(username.toLowerCase())) return 'it may not contain the username';
  if (new Set(password).size < 4) return 'it needs at least 4 different characters';
  const core = lower.replace(/[^a-z]/g, '');
  if (COMMON.has(lower) || (core.length >= 5 && COMMON.has(core)))
    return 'it is one of the most common passwords';
  if (/^(\d+|[a-z]+)$/i.test(password) && /^(0123|1234|abcd|qwer)/i.test(password))
    return 'it is a keyboard or number sequence';
  return null;
}
