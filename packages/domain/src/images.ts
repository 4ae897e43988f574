/** The registry host an image reference names, or null for Docker Hub. */
export function registryOf(ref: string): string | null {
  const first = ref.split('/')[0]!;
  return ref.includes('/') && (/[.:]/.test(first) || first === 'localhost') ? first : null;
}

/**
 * Why a job may not build on `ref`, or null. Trainyard's own images (other jobs' in its
 * registry, the build cache, the default base by its name) are no job's base, whatever name
 * reaches them: a job that built on another's would read its code.
 */
export function refusedBase(ref: string, registry: string | undefined): string | null {
  const host = registryOf(ref);
  if (host !== null && host.toLowerCase() === registry?.toLowerCase())
    return `${ref} is in Trainyard's own registry, which holds other jobs' images`;
  const path = host ? ref.slice(host.length + 1) : ref;
  if (
    /^(library\/)?trainyard[/:]/.test(path) ||
    (host === 'docker.io' && /^trainyard\//.test(path))
  )
    return `${ref} names Trainyard's own images; name python for the default base`;
  return null;
}
