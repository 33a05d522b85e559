// Lint: typescript-eslint's recommended rules plus the type-aware ones that catch
// unhandled promises, the usual way a Node server loses errors.
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['node_modules/**', 'lib/control-plane/gen/**', '.tap/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': 'error',
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts', 'server/demo.ts', 'scripts/**/*.ts'],
    rules: { 'no-console': 'off' },
  },
  {
    // tap runs the subtests t.test() returns itself (its documented style); every other
    // promise in a test must still be awaited.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': ['error', { allowForKnownSafeCalls: [{ from: 'package', name: 'test', package: '@tapjs/test' }] }],
    },
  },
)
