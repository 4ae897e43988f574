import { describe, expect, it } from 'vitest';
import type { TeamEvent } from '@trainyard/events';
import {
  decideTeam,
  describePending,
  DomainError,
  emptyCluster,
  evolveCluster,
  evolveTeam,
  explainQueue,
  initialTeam,
  plan,
  restoreCluster,
  snapshotCluster,
  teamAccount,
  type ClusterState,
  type TeamCommand,
} from '../src/index.ts';
import { commit, spec, stored, T0, worker } from './given.ts';

const team = (events: TeamEvent[]) => events.reduce(evolveTeam, initialTeam('vision'));
const decide = (events: TeamEvent[], command: TeamCommand) => decideTeam(command, team(events));
const created: TeamEvent = { type: 'TeamCreated', data: { name: 'vision' } };

describe('the team decider', () => {
  it('makes a team once, and refuses commands on one that does not exist', () => {
    expect(decide([], { type: 'CreateTeam' })).toEqual([created]);
    expect(() => decide([created], { type: 'CreateTeam' })).toThrow(DomainError);
    expect(() => decide([], { type: 'SetTeamQuota', maxGpus: 1 })).toThrow(/team vision not found/);
  });

  it('adds, changes and removes members, saying each change once', () => {
    const added = decide([created], { type: 'AddTeamMember', username: 'alice', role: 'member' });
    expect(added).toEqual([
      { type: 'TeamMemberAdded', data: { username: 'alice', role: 'member' } },
    ]);
    const events = [created, ...added];
    expect(decide(events, { type: 'AddTeamMember', username: 'alice', role: 'member' })).toEqual(
      [],
    );
    const promoted = decide(events, { type: 'AddTeamMember', username: 'alice', role: 'lead' });
    expect(team([...events, ...promoted]).members).toEqual({ alice: 'lead' });
    expect(decide([...events, ...promoted], { type: 'AddTeamMember', username: 'alice' })).toEqual(
      [],
    );
    expect(decide([created], { type: 'AddTeamMember', username: 'bob' })).toEqual([
      { type: 'TeamMemberAdded', data: { username: 'bob', role: 'member' } },
    ]);
    const removed = decide(events, { type: 'RemoveTeamMember', username: 'alice' });
    expect(team([...events, ...removed]).members).toEqual({});
    expect(decide(events, { type: 'RemoveTeamMember', username: 'bob' })).toEqual([]);
    expect(decide(events, { type: 'SetTeamQuota', maxGpus: null })).toEqual([]);
    expect(decide(events, { type: 'SetTeamQuota', maxGpus: 4 })).toEqual([
      { type: 'TeamQuotaSet', data: { maxGpus: 4 } },
    ]);
  });
});

describe('team quotas in placement', () => {
  const oneGpu = { resources: { gpus: 1, vramGb: 20 } };
  const submitFor = (c: ClusterState, id: string, owner: string, teamName?: string) =>
    evolveCluster(
      c,
      stored('job', id, {
        type: 'JobSubmitted',
        data: { owner, spec: spec(oneGpu), ...(teamName && { team: teamName }) },
      }),
    );
  const teamQuota = (c: ClusterState, maxGpus: number | null) =>
    evolveCluster(c, stored('team', 'vision', { type: 'TeamQuotaSet', data: { maxGpus } }));
  const placed = (c: ClusterState) =>
    plan(c, T0)
      .assignments.map((a) => a.id)
      .sort();

  it('holds back what would take a team past its quota, whichever member submits it', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24, 24]);
    teamQuota(c, 2);
    submitFor(c, 'job_a1', 'alice', 'vision');
    submitFor(c, 'job_b1', 'bob', 'vision');
    submitFor(c, 'job_b2', 'bob', 'vision');
    submitFor(c, 'job_c1', 'carol');
    expect(placed(c)).toEqual(['job_a1', 'job_b1', 'job_c1']);
    commit(c);
    expect(c.gpusHeld.get(teamAccount('vision'))).toBe(2);
    const [entry] = explainQueue(c, T0).entries;
    expect(describePending(entry!)).toMatchObject({
      id: 'job_b2',
      reason: 'overQuota',
      message:
        "over team vision's quota: its members’ work holds 2 GPUs of the 2 it may hold at once (with what the next round places), and this needs 1 more",
    });
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect(restored.gpusHeld.get(teamAccount('vision'))).toBe(2);
    expect(placed(restored)).toEqual([]);
    teamQuota(c, null);
    expect(placed(c)).toEqual(['job_b2']);
  });

  it('holds a member to their own quota as well as their team’s', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24, 24]);
    teamQuota(c, 3);
    evolveCluster(c, stored('user', 'alice', { type: 'UserQuotaSet', data: { maxGpus: 1 } }));
    submitFor(c, 'job_a1', 'alice', 'vision');
    submitFor(c, 'job_a2', 'alice', 'vision');
    expect(placed(c)).toEqual(['job_a1']);
    commit(c);
    expect(explainQueue(c, T0).entries[0]?.quota).toEqual({
      kind: 'gpus',
      held: 1,
      limit: 1,
      team: null,
    });
  });
});
