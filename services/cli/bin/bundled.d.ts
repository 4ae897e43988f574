export interface BundleManifest {
  commands: string[];
  inputs: string[];
}
export const dist: URL;
export const bundleFile: URL;
export function bundleManifest(): BundleManifest | null;
export function isFresh(manifest: BundleManifest): boolean;
