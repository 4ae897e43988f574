import type Docker from 'dockerode';

/**
 * Removes Trainyard's images from the engine: those older than `maxAgeMs`, then the oldest until
 * the rest take at most `maxTotalBytes`. An image a container uses, running or not, stays and
 * still counts. Sizes are the engine's, each counting the layers it shares with others.
 */
export async function pruneImages(
  docker: Docker,
  opts: { maxAgeMs: number; maxTotalBytes: number; now?: Date },
): Promise<{ removed: string[] }> {
  const now = (opts.now ?? new Date()).getTime();
  const images = await docker.listImages({ filters: { label: ['trainyard.build=1'] } });
  images.sort((a, b) => a.Created - b.Created);
  const containers = await docker.listContainers({ all: true });
  const inUse = new Set(containers.map((c) => c.ImageID));
  let total = images.reduce((sum, i) => sum + i.Size, 0);
  const removed: string[] = [];
  for (const image of images) {
    const old = now - image.Created * 1000 > opts.maxAgeMs;
    if ((!old && total <= opts.maxTotalBytes) || inUse.has(image.Id)) continue;
    try {
      // Forced because an image pushed to a second registry has tags in two repositories. A
      // container made since the listing still keeps it if it runs: the engine refuses then.
      await docker.getImage(image.Id).remove({ force: true });
    } catch (err) {
      const status = (err as { statusCode?: number }).statusCode;
      if (status === 409 || status === 404) continue;
      throw err;
    }
    removed.push(image.Id);
    total -= image.Size;
  }
  return { removed };
}
