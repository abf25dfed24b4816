"""Bugs the cluster simulator found in the server logic it mirrors, by name.

The server's asyncio code (server/js/clustered, server/js/consumer_runtime.py) carries the
fix of every bug named here, each with a test of its own (tests/unit/server/test_js_*.py,
tests/integration/jetstream/test_consumers_pull.py). The simulator mirrors the server's
decisions and keeps each fix as a switch, on in every campaign (ClusterConfig.fixes):
`python -m jetraft.sim --cluster --seed S --without NAME` replays a seed as the server
behaved without the fix, and tests/sim/test_cluster_sim.py keeps, for each, a seed on
which the simulator catches the bug without it, so CI proves the simulator still tells.
Seeds named here are those that found each bug, under the code of the day: later changes
move schedules.

Where the server does a little more than a switch describes, the simulator mirrors that
too: a lost log is one without the bootstrap record (its directory or its files gone);
a leaving replica that was never given its group's configuration, or whose asset is
deleted, is destroyed at once.
"""

from __future__ import annotations

FIXES: dict[str, str] = {
    "ignored_ack_unanswered": (
        "an ack sent as a request that the consumer leader ignores (a message it does not "
        "know was delivered: the old leader's Delivered entry is not applied here yet) or "
        "could not propose is not answered; the runtime answers it at once (seed 4)"),
    "durable_destroy": (
        "removing a replica's log (RaftGroup.destroy: shutil.rmtree) syncs the directory; "
        "without it a power loss brings back some of the unlinked segments, and the "
        "replica restarts on an older log (seed 10: an old configuration in which it "
        "was the only voter)"),
    "replica_starts_with_first_config": (
        "a stream replica starts its Stream with the config its group started with "
        "(StreamAssignment.first_config), not the assignment's current one: a replica "
        "joining or restarting without a snapshot replays the group's log from its first "
        "entry, and entries before an UpdateConfig were applied under the old config "
        "(seed 20: a smaller max_msg_size refused messages the others had stored)"),
    "leaving_follows_assignment": (
        "a replica on its way out of a group (_leave) takes newer assignments that still "
        "leave its server out, so as a leader it reconciles towards the current one, and "
        "hands leadership only to a voter of that assignment; the server keeps it on the "
        "assignment it left with and steps down to whichever voter RAFT picks, so two "
        "leaving replicas hand leadership back and forth, reshaping the group towards an "
        "old assignment (seed 6: 170 terms, never converged)"),
    "lost_log_marked": (
        "a replica declared damaged because its log is lost (RaftGroup.start: a known "
        "group, an empty log) records that durably (Wal.mark_corrupt); the server only "
        "tells the driver, so after the damaged replica persisted its new term, the next "
        "restart finds a non-empty log and starts it as a healthy replica: an empty log "
        "that campaigns (seed 39: the sole voter of an old configuration, elected)"),
    "rejoin_fresh": (
        "a server assigned to a group again while its old replica is still leaving takes "
        "that replica back only if its group has not let it go; one stopped for good "
        "(removed) is destroyed and a fresh replica joins (seed 28: the leader waited for "
        "a learner that never ran); the same for a replica assigned here again before its "
        "removal was applied (seed 269)"),
    "lost_log_means_missing_dir": (
        "a known group's replica counts as having lost its log only when the group's "
        "directory is gone (the disk was wiped, or the server had removed it), not when "
        "the directory is there but empty: then the replica never made anything durable, "
        "so it acknowledged nothing and voted for nobody, and may vote as a fresh one. "
        "Needed with the RAFT rule that a replica which recovered nothing at all votes "
        "for nobody until repaired (seed 31: a two-voter group whose other voter crashed "
        "before its first fsync could never elect a leader)"),
    "bootstrap_recorded": (
        "a replica records durably how it started (Wal.set_bootstrap: the new group's "
        "first voters, or none when it joined) and every restart starts it that way; the "
        "server starts a replayed replica with the peers of the assignment being "
        "replayed, possibly the group's first while the group has moved on (seed 14: two "
        "servers removed and added again, restarted with empty logs, elected each "
        "other). Starting every empty replayed replica without peers instead leaves a "
        "new group whose replicas all crashed before their first fsync without a leader "
        "for good (seed 76)"),
    "reconcile_wakes_on_assignment": (
        "a leader waiting for a learner to catch up (reconcile_members, up to 30 s) also "
        "stops waiting when the assignment changes; the server's wait ignores it, so a "
        "group scaled down meanwhile keeps its unwanted replicas for 30 s (seed 219)"),
    "leave_only_when_removed": (
        "a replica taken out of its group is destroyed only once the group let it go; "
        "the server destroys it after LEAVE_TIMEOUT_S (30 s) regardless, and when it is "
        "still a voter the group may never reach a quorum again (seed 219: scaled from "
        "three to one, the leaving voter destroyed before the leader could remove it, "
        "the remaining one alone in a two-voter group)"),
    "restart_keeps_leaving": (
        "on restart, a group log on disk whose assignment no longer names this server "
        "(its replica was on its way out) is started again as leaving, to serve until "
        "the group lets it go; the server starts only what the assignments name, so a "
        "voter its group still counts is gone for good (seed 361: a two-voter consumer "
        "group never elected a leader again)"),
    "updates_marked": (
        "the meta leader marks a stream update or peer removal as an update "
        "(AssignStream.update), which MetaState.apply ignores once the stream is gone: "
        "the server proposes a plain assignment, so an update planned before a delete "
        "was applied made the stream again after it, empty, under its old group name "
        "(seed 1045)"),
    "leave_when_removed": (
        "a replica on its way out is destroyed once a committed configuration without it "
        "took effect (its driver stopped as removed); the server also destroys it when "
        "the newest configuration in its log leaves it out, committed or not, and when "
        "that entry is lost (the leader failed before it committed) the group still "
        "counts a voter whose log is gone (seed 1290: two voters, one destroyed, no "
        "leader ever again)"),
    "reconcile_retried": (
        "a stream or consumer leader whose group differs from its assignment starts "
        "reconciling again when idle (checked every second); the server starts it only "
        "when leadership or the assignment changes, and a run that ended early (a failed "
        "step, its 20 rounds used up) leaves the group as it is for good (seed 2313: "
        "scaled to one replica, three voters kept)"),
    "consumer_reads_current_stream": (
        "a consumer replica reads the stream replica its server has now; the server's "
        "keeps the one that existed when it was made, so after its server left the "
        "stream and came back, its leader delivers from a destroyed replica's store "
        "that nobody updates (seed 171: delivered 17 of 115, for good)"),
    "meta_applied_recorded": (
        "the server records durably the meta index up to which it has carried out the "
        "meta group's changes (starting, reshaping, destroying replicas), and on restart "
        "counts as replayed (\"known\" groups) exactly the entries up to there. The "
        "server counts every entry in the meta log as replayed: an entry not committed "
        "before the restart was never carried out, so a new R1 stream's only replica "
        "started as one that lost its log and was never led (seed 60); and counting only "
        "up to the durable commit index is no better, as it lags: an old assignment "
        "applied again made a destroyed replica fresh, the only voter, elected (seed 60 "
        "again, with that rule)"),
    "delivery_refused_requeued": (
        "a consumer leader whose Delivered entry the group refused or dropped (a leadership "
        "transfer in progress refuses every proposal) hands that message out again "
        "(ConsumerCore.undeliver: the cursor goes back to it); the server only noted the "
        "refusal, its cursor already past the message, and a leader whose transfer "
        "expired kept leading without ever delivering it again (seed 290, 5 servers: "
        "delivered 48 of 50, for good)"),
    "snapshot_placements_known": (
        "a server tells whether it carried out a placement that reaches it in a meta "
        "snapshot (its own on restart, or one its leader sent because it fell behind) by "
        "the meta index that placed it (StreamAssignment.placed), and whether its replica "
        "joins an existing group the same way; the server took every snapshot placement "
        "as carried out, so a replica placed while it was down started as one that lost "
        "its log and voted for nobody (seed 366, 5 servers: a consumer group with its "
        "third replica damaged elected no one, for good)"),
}
ALL_FIXES = frozenset(FIXES)
