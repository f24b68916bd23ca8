import { Chart, chartPaths } from '../chart';

describe('chartPaths', () => {
  it('draws time left to right and values bottom to top', () => {
    const { line, area } = chartPaths(
      [
        { t: 0, v: 0 },
        { t: 50, v: 50 },
        { t: 100, v: 100 }
      ],
      100,
      200,
      100
    );
    expect(line).toBe('M0 100 L100 50 L200 0');
    expect(area).toBe('M0 100 L0 100 L100 50 L200 0 L200 100 Z');
  });

  it('breaks the line at gaps and clamps values', () => {
    const { line } = chartPaths(
      [
        { t: 0, v: 150 },
        { t: 1, v: 10 },
        { t: 2, v: null },
        { t: 3, v: -5 },
        { t: 4, v: 20 }
      ],
      100,
      40,
      10
    );
    expect(line).toBe('M0 0 L10 9 M30 10 L40 8');
  });

  it('draws nothing without points or scale, and a stub for one point', () => {
    expect(chartPaths([], 100)).toEqual({ line: '', area: '' });
    expect(chartPaths([{ t: 0, v: 1 }], 0)).toEqual({ line: '', area: '' });
    expect(chartPaths([{ t: 5, v: 50 }], 100, 300, 80).line).toBe(
      'M300 40 L300 40'
    );
  });
});

describe('Chart', () => {
  it('builds the SVG once and updates its paths and labels', () => {
    const chart = new Chart('jp-gpu-Chart-util');
    expect(chart.node.className).toBe('jp-gpu-Chart jp-gpu-Chart-util');
    const svg = chart.node.querySelector('svg')!;
    expect(svg.getAttribute('viewBox')).toBe('0 0 300 80');
    expect(svg.querySelectorAll('.jp-gpu-Chart-grid')).toHaveLength(3);
    chart.update({
      title: 'GPU utilization',
      caption: 'now 63% · peak 70%',
      paths: { line: 'M0 10 L300 20', area: 'M0 80 L0 10 L300 20 L300 80 Z' },
      top: '100%',
      start: '19:48',
      end: 'now'
    });
    expect(svg.getAttribute('aria-label')).toBe(
      'GPU utilization: now 63% · peak 70%'
    );
    expect(
      chart.node.querySelector('.jp-gpu-Chart-line')!.getAttribute('d')
    ).toBe('M0 10 L300 20');
    expect(
      chart.node.querySelector('.jp-gpu-Chart-area')!.getAttribute('d')
    ).toBe('M0 80 L0 10 L300 20 L300 80 Z');
    expect(chart.node.querySelector('.jp-gpu-Chart-top')!.textContent).toBe(
      '100%'
    );
    expect(chart.node.querySelector('.jp-gpu-Chart-axis')!.textContent).toBe(
      '19:48now'
    );
    expect(chart.node.querySelector('figcaption')!.textContent).toBe(
      'GPU utilization' + 'now 63% · peak 70%'
    );
  });
});
