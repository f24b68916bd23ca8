// Jest runs the TypeScript unit tests in src/__tests__ through ts-jest, in jsdom
// (Lumino widgets expect a browser). The tests import only modules that do not load
// JupyterLab's ES-module packages at run time (those that would are mocked in the test), but
// for @jupyterlab/translation's gettext, which ts-jest compiles.
/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  setupFiles: ['<rootDir>/jest.setup.js'],
  testMatch: ['**/__tests__/**/*.spec.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }],
    // JupyterLab's gettext (an ES module): the tests load the extension's catalog with it
    '/@jupyterlab/translation/lib/.+\\.js$': [
      'ts-jest',
      { tsconfig: 'tsconfig.test.json' }
    ]
  },
  transformIgnorePatterns: ['/node_modules/(?!@jupyterlab/translation/)'],
  moduleFileExtensions: ['ts', 'js', 'json']
};
