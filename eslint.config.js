// ESLint for kpr's TypeScript; `npx eslint .` (docs/contributing.md), run by
// test/codebase/lint.test.ts. Type-aware: the promise rules read
// tsconfig.json through the project service.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'build/', 'node_modules/', 'charts/', '**/*.js', '**/*.mjs', '**/*.cjs'] },
  {
    files: ['**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A promise nobody awaits or catches hides its failure. node:test's
      // test/it/describe return promises the runner itself tracks.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] }] },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // `x != null` (null or undefined) is the one loose comparison allowed.
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'no-fallthrough': 'error',
      'prefer-const': 'error',
      // `for (;;)` and `while (true)` loops are deliberate.
      'no-constant-condition': ['error', { checkLoops: false }],
      // Off: `any` marks koffi's FFI values and raw JSON at the edges on purpose; typing them is a change of its own.
      '@typescript-eslint/no-explicit-any': 'off',
      // Off: the tests' regexes match the CLI's column-aligned tables, where runs of spaces are the point.
      'no-regex-spaces': 'off',
      // Off: rethrown errors already carry the cause's message; adding `cause` would change what is logged.
      'preserve-caught-error': 'off',
    },
  },
);
