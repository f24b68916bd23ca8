/**
 * The layout of src/: views do not import each other, not even through the
 * shared modules; no import circle; index.ts holds plugin definitions and their wiring only,
 * with ids in the '<package>:<plugin>' style.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as ts from 'typescript';

const SRC = path.resolve(__dirname, '..');
const ROOT = path.resolve(SRC, '..');

/** The modules that put something on screen; each may import only non-view modules. */
const VIEWS = [
  'advice',
  'jobs',
  'notices',
  'panel',
  'statusbar',
  'stopwhendone'
];

const modules = fs
  .readdirSync(SRC)
  .filter(name => name.endsWith('.ts') && !name.endsWith('.d.ts'))
  .map(name => name.slice(0, -3));

function parse(module: string): ts.SourceFile {
  const file = path.join(SRC, `${module}.ts`);
  return ts.createSourceFile(
    file,
    fs.readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    true
  );
}

/** The local modules a module imports (type-only imports too). */
function localImports(module: string): string[] {
  const found: string[] = [];
  for (const statement of parse(module).statements) {
    if (
      (ts.isImportDeclaration(statement) ||
        ts.isExportDeclaration(statement)) &&
      statement.moduleSpecifier &&
      ts.isStringLiteral(statement.moduleSpecifier)
    ) {
      const spec = statement.moduleSpecifier.text;
      if (spec.startsWith('./')) {
        found.push(spec.slice(2));
      }
    }
  }
  return found;
}

const graph = new Map(modules.map(m => [m, localImports(m)]));

/** Every local module reachable from `module`, with the path that reaches it. */
function reachable(module: string): Map<string, string[]> {
  const seen = new Map<string, string[]>();
  const queue: Array<[string, string[]]> = [[module, [module]]];
  while (queue.length) {
    const [current, via] = queue.shift()!;
    for (const next of graph.get(current) ?? []) {
      if (!seen.has(next)) {
        seen.set(next, [...via, next]);
        queue.push([next, [...via, next]]);
      }
    }
  }
  return seen;
}

describe('the layout of src/', () => {
  it('knows every view module', () => {
    for (const view of VIEWS) {
      expect(modules).toContain(view);
    }
    for (const module of modules) {
      expect(graph.get(module)!.every(m => modules.includes(m))).toBe(true);
    }
  });

  it('has views that import no other view, directly or not', () => {
    const offences: string[] = [];
    for (const view of VIEWS) {
      for (const [module, via] of reachable(view)) {
        if (VIEWS.includes(module) && module !== view) {
          offences.push(via.join(' -> '));
        }
      }
    }
    expect(offences).toEqual([]);
  });

  it('has no import circle', () => {
    const circles = modules
      .filter(module => reachable(module).has(module))
      .map(module => reachable(module).get(module)!.join(' -> '));
    expect(circles).toEqual([]);
  });

  it('imports index.ts from no module', () => {
    expect(modules.filter(m => graph.get(m)!.includes('index'))).toEqual([]);
  });
});

describe('index.ts', () => {
  const source = parse('index');
  const packageName = JSON.parse(
    fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')
  ).name as string;

  /** Whether a declared type is `JupyterFrontEndPlugin<...>` (one plugin, not the list). */
  function isPluginType(type: ts.TypeNode | undefined): boolean {
    return /^JupyterFrontEndPlugin<[^[\]]*>$/.test(type?.getText(source) ?? '');
  }

  /** The object literals of the top-level `const x: JupyterFrontEndPlugin<...> = {...}`. */
  function pluginLiterals(): ts.ObjectLiteralExpression[] {
    const literals: ts.ObjectLiteralExpression[] = [];
    for (const statement of source.statements) {
      if (!ts.isVariableStatement(statement)) {
        continue;
      }
      for (const declaration of statement.declarationList.declarations) {
        if (isPluginType(declaration.type)) {
          expect(
            declaration.initializer &&
              ts.isObjectLiteralExpression(declaration.initializer)
          ).toBe(true);
          literals.push(declaration.initializer as ts.ObjectLiteralExpression);
        }
      }
    }
    return literals;
  }

  function pluginIds(): string[] {
    return pluginLiterals().map(literal => {
      const id = literal.properties.find(
        p => ts.isPropertyAssignment(p) && p.name.getText(source) === 'id'
      ) as ts.PropertyAssignment | undefined;
      expect(id && ts.isStringLiteral(id.initializer)).toBe(true);
      return (id!.initializer as ts.StringLiteral).text;
    });
  }

  it('holds only imports, plugin definitions and the default plugin list', () => {
    const offences: string[] = [];
    for (const statement of source.statements) {
      const text = statement.getText(source).split('\n')[0];
      if (ts.isImportDeclaration(statement)) {
        continue;
      }
      if (ts.isExportAssignment(statement) && !statement.isExportEquals) {
        continue;
      }
      if (ts.isVariableStatement(statement)) {
        const exported = statement.modifiers?.some(
          m => m.kind === ts.SyntaxKind.ExportKeyword
        );
        const plugins = statement.declarationList.declarations.every(d =>
          /^JupyterFrontEndPlugin<.*>(\[\])?$/.test(
            d.type?.getText(source) ?? ''
          )
        );
        if (!exported && plugins) {
          continue;
        }
      }
      offences.push(text);
    }
    expect(offences).toEqual([]);
  });

  it('defines no class, function or namespace, even inside a plugin', () => {
    const offences: string[] = [];
    const visit = (node: ts.Node): void => {
      if (
        ts.isClassDeclaration(node) ||
        ts.isClassExpression(node) ||
        ts.isFunctionDeclaration(node) ||
        ts.isModuleDeclaration(node) ||
        ts.isInterfaceDeclaration(node)
      ) {
        offences.push(node.getText(source).split('\n')[0]);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
    expect(offences).toEqual([]);
  });

  it("names its plugins '<package>:<plugin>', each once, and exports them all", () => {
    const ids = pluginIds();
    expect(ids.length).toBeGreaterThan(1);
    for (const id of ids) {
      expect(id).toMatch(new RegExp(`^${packageName}:[a-z]+(-[a-z]+)*$`));
    }
    expect(new Set(ids).size).toBe(ids.length);
    const exported = source.statements.find(ts.isExportAssignment)!;
    const list = source.statements
      .filter(ts.isVariableStatement)
      .flatMap(s => [...s.declarationList.declarations])
      .find(
        d => d.name.getText(source) === exported.expression.getText(source)
      );
    expect(list && ts.isArrayLiteralExpression(list.initializer!)).toBe(true);
    const names = (list!.initializer as ts.ArrayLiteralExpression).elements.map(
      e => e.getText(source)
    );
    const defined = source.statements
      .filter(ts.isVariableStatement)
      .flatMap(s => [...s.declarationList.declarations])
      .filter(d => isPluginType(d.type))
      .map(d => d.name.getText(source));
    expect([...names].sort()).toEqual([...defined].sort());
  });

  it('has a plugin for each settings schema (the schema file is named by the plugin)', () => {
    const ids = pluginIds();
    const schemas = fs
      .readdirSync(path.join(ROOT, 'schema'))
      .filter(name => name.endsWith('.json'));
    expect(schemas.length).toBeGreaterThan(0);
    for (const schema of schemas) {
      expect(ids).toContain(`${packageName}:${schema.slice(0, -5)}`);
    }
  });
});
