/**
 * The extension's icon (a GPU chip), used by the side panel tab and the settings editor.
 */
import { LabIcon } from '@jupyterlab/ui-components';

const GPU_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M5 5h14v14H5zM7 7v10h10V7z"/>
    <path d="M9 9h6v6H9z"/>
    <path d="M9 2h2v3H9zm4 0h2v3h-2zM9 19h2v3H9zm4 0h2v3h-2zM2 9h3v2H2zm0 4h3v2H2zm17-4h3v2h-3zm0 4h3v2h-3z"/>
  </g>
</svg>`;

export const gpuIcon = new LabIcon({
  name: 'jupyterhub-gpu:gpu',
  svgstr: GPU_SVG
});
