//! The `simple` assignor of share groups (KIP-932; Kafka's `SimpleAssignor` with its homogeneous
//! and heterogeneous builders), the only one `group.share.assignors` offers.
//!
//! Unlike a consumer group's assignors, a partition may go to several members: every member of a
//! share group may fetch any partition (records are acquired one by one), so the assignment only
//! steers clients. With `P` partitions and `M` members, each partition is shared by
//! `ceil(M / P)` members (one member per partition while `M <= P`), and the `ceil(M/P) * P`
//! assignments are split evenly: member `i` (in member-id order) gets
//! `ceil(n*(i+1)/M) - ceil(n*i/M)` of them. Starting from the current target (sticky), it
//! (1) drops partitions no longer subscribed or gone, (2) trims members over their quota,
//! (3) trims partitions shared by more members than wanted, (4) hands under-shared partitions
//! round-robin to members under their quota, never the same partition twice to one member.
//!
//! When subscriptions differ (heterogeneous), each topic is balanced on its own among the members
//! subscribed to it, with the member order rotated per topic so that the remainders of different
//! topics fall on different members; loads then differ by at most one partition per topic.
//!
//! Pure functions; the share group state machine (`share_group.rs`) calls [`assign`] whenever the
//! group epoch moves past the assignment epoch.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::assignor::{Assignment, AssignorMember};

/// The assignor's name, as ShareGroupDescribe reports it and `group.share.assignors` names it.
pub const SIMPLE_ASSIGNOR_NAME: &str = "simple";

/// Kafka's class name of the same assignor, which `group.share.assignors` also accepts.
pub const SIMPLE_ASSIGNOR_CLASS: &str =
    "org.apache.kafka.coordinator.group.assignor.SimpleAssignor";

/// A topic-partition.
type Tp = (Uuid, i32);

/// The new target assignment of every member (members with nothing get an empty assignment).
/// `topics` maps each subscribed topic to its partition count.
pub fn assign(
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    let mut members: Vec<&AssignorMember<'_>> = members.iter().collect();
    members.sort_by(|a, b| a.member_id.cmp(b.member_id));
    let homogeneous = members
        .windows(2)
        .all(|w| w[0].subscribed == w[1].subscribed);
    if homogeneous {
        let subscribed = members
            .first()
            .map(|m| m.subscribed.clone())
            .unwrap_or_default();
        let partitions = partitions_of(&subscribed, topics);
        let current: Vec<BTreeSet<Tp>> = members.iter().map(|m| current_of(m)).collect();
        let ids: Vec<&str> = members.iter().map(|m| m.member_id).collect();
        merge(&mut out, &ids, build(&partitions, &current));
        return out;
    }
    for (index, (topic, count)) in topics.iter().enumerate() {
        let mut subscribers: Vec<&AssignorMember<'_>> = members
            .iter()
            .copied()
            .filter(|m| m.subscribed.contains(topic))
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let shift = index % subscribers.len();
        subscribers.rotate_left(shift);
        let partitions = partitions_of(
            &BTreeSet::from([*topic]),
            &BTreeMap::from([(*topic, *count)]),
        );
        let current: Vec<BTreeSet<Tp>> = subscribers
            .iter()
            .map(|m| {
                current_of(m)
                    .into_iter()
                    .filter(|(t, _)| t == topic)
                    .collect()
            })
            .collect();
        let ids: Vec<&str> = subscribers.iter().map(|m| m.member_id).collect();
        merge(&mut out, &ids, build(&partitions, &current));
    }
    out
}

fn partitions_of(subscribed: &BTreeSet<Uuid>, topics: &BTreeMap<Uuid, i32>) -> Vec<Tp> {
    subscribed
        .iter()
        .filter_map(|t| topics.get(t).map(|n| (*t, *n)))
        .flat_map(|(t, n)| (0..n.max(0)).map(move |p| (t, p)))
        .collect()
}

fn current_of(m: &AssignorMember<'_>) -> BTreeSet<Tp> {
    m.current
        .into_iter()
        .flatten()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        .collect()
}

fn merge(out: &mut BTreeMap<String, Assignment>, ids: &[&str], built: Vec<BTreeSet<Tp>>) {
    for (id, tps) in ids.iter().zip(built) {
        let a = out.entry((*id).to_string()).or_default();
        for (t, p) in tps {
            a.entry(t).or_default().insert(p);
        }
    }
}

/// Each member's quota of the `sharing * partitions` assignments: an even split, the larger
/// shares first. Integer arithmetic, so the quotas always add up exactly.
fn quotas(assignments: usize, members: usize) -> Vec<usize> {
    let ceil_div = |a: usize, b: usize| a.div_ceil(b);
    (0..members)
        .map(|i| ceil_div(assignments * (i + 1), members) - ceil_div(assignments * i, members))
        .collect()
}

/// The homogeneous builder over `partitions` for members whose current assignments are
/// `current` (same order); returns each member's new assignment.
fn build(partitions: &[Tp], current: &[BTreeSet<Tp>]) -> Vec<BTreeSet<Tp>> {
    let members = current.len();
    if members == 0 || partitions.is_empty() {
        return vec![BTreeSet::new(); members];
    }
    let sharing = members.div_ceil(partitions.len());
    let quota = quotas(sharing * partitions.len(), members);
    let valid: BTreeSet<Tp> = partitions.iter().copied().collect();
    // (1) What is no longer assignable goes; (2) members over quota keep their first ones.
    let mut assigned: Vec<BTreeSet<Tp>> = current
        .iter()
        .zip(&quota)
        .map(|(tps, q)| {
            tps.iter()
                .filter(|tp| valid.contains(tp))
                .take(*q)
                .copied()
                .collect()
        })
        .collect();
    // (3) Partitions shared by more members than wanted leave the later members.
    let mut holders: BTreeMap<Tp, usize> = BTreeMap::new();
    for a in &mut assigned {
        a.retain(|tp| {
            let n = holders.entry(*tp).or_default();
            if *n >= sharing {
                return false;
            }
            *n += 1;
            true
        });
    }
    // (4) Under-shared partitions go round-robin to members under their quota.
    let mut next = 0usize;
    for tp in partitions {
        let mut have = holders.get(tp).copied().unwrap_or(0);
        while have < sharing {
            let found = (0..members)
                .map(|k| (next + k) % members)
                .find(|&i| assigned[i].len() < quota[i] && !assigned[i].contains(tp));
            let Some(i) = found else {
                break;
            };
            assigned[i].insert(*tp);
            have += 1;
            next = (i + 1) % members;
        }
    }
    assigned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn member<'a>(
        id: &'a str,
        topics: &[Uuid],
        current: Option<&'a Assignment>,
    ) -> AssignorMember<'a> {
        AssignorMember {
            member_id: id,
            subscribed: topics.iter().copied().collect(),
            current,
        }
    }

    /// Every partition of every topic held by how many members.
    fn sharing(out: &BTreeMap<String, Assignment>) -> BTreeMap<Tp, usize> {
        let mut n = BTreeMap::new();
        for a in out.values() {
            for (t, ps) in a {
                for p in ps {
                    *n.entry((*t, *p)).or_default() += 1;
                }
            }
        }
        n
    }

    fn check(
        partitions: i32,
        member_count: usize,
        expected_counts: &[usize],
        expected_sharing: usize,
    ) {
        let t = topic(1);
        let ids: Vec<String> = (0..member_count).map(|i| format!("m{i}")).collect();
        let members: Vec<AssignorMember<'_>> =
            ids.iter().map(|id| member(id, &[t], None)).collect();
        let out = assign(&members, &BTreeMap::from([(t, partitions)]));
        let counts: Vec<usize> = ids.iter().map(|id| count(&out[id])).collect();
        assert_eq!(counts, expected_counts, "P={partitions} M={member_count}");
        let shared = sharing(&out);
        assert_eq!(
            shared.len(),
            partitions as usize,
            "every partition assigned"
        );
        assert!(
            shared.values().all(|n| *n == expected_sharing),
            "{shared:?}"
        );
    }

    #[test]
    fn research_examples() {
        check(6, 2, &[3, 3], 1);
        check(1, 3, &[1, 1, 1], 3);
        check(3, 5, &[2, 1, 1, 1, 1], 2);
        check(4, 4, &[1, 1, 1, 1], 1);
        check(5, 2, &[3, 2], 1);
    }

    #[test]
    fn quotas_add_up() {
        for members in 1..40usize {
            for partitions in 1..40 {
                let sharing: usize = members.div_ceil(partitions);
                let q = quotas(sharing * partitions, members);
                assert_eq!(q.iter().sum::<usize>(), sharing * partitions);
                let (lo, hi) = (q.iter().min().copied(), q.iter().max().copied());
                assert!(hi.unwrap_or(0) - lo.unwrap_or(0) <= 1, "{q:?}");
            }
        }
    }

    #[test]
    fn sticky_when_a_member_joins_and_leaves() {
        let t = topic(1);
        let topics = BTreeMap::from([(t, 6)]);
        let first = assign(&[member("a", &[t], None), member("b", &[t], None)], &topics);
        // A third member: each old member keeps two of its three partitions.
        let members = [
            member("a", &[t], Some(&first["a"])),
            member("b", &[t], Some(&first["b"])),
            member("c", &[t], None),
        ];
        let second = assign(&members, &topics);
        for id in ["a", "b"] {
            assert_eq!(count(&second[id]), 2);
            assert!(
                second[id][&t].is_subset(&first[id][&t]),
                "{id} kept its own"
            );
        }
        assert_eq!(count(&second["c"]), 2);
        // c leaves: a and b keep what they had and take c's back.
        let members = [
            member("a", &[t], Some(&second["a"])),
            member("b", &[t], Some(&second["b"])),
        ];
        let third = assign(&members, &topics);
        for id in ["a", "b"] {
            assert!(second[id][&t].is_subset(&third[id][&t]));
            assert_eq!(count(&third[id]), 3);
        }
    }

    #[test]
    fn unsubscribed_and_deleted_topics_are_dropped() {
        let (t1, t2) = (topic(1), topic(2));
        let old = Assignment::from([(t1, BTreeSet::from([0, 1])), (t2, BTreeSet::from([0]))]);
        let out = assign(
            &[member("a", &[t1], Some(&old))],
            &BTreeMap::from([(t1, 1)]),
        );
        assert_eq!(out["a"], Assignment::from([(t1, BTreeSet::from([0]))]));
    }

    #[test]
    fn heterogeneous_balances_each_topic_among_its_subscribers() {
        let (t1, t2) = (topic(1), topic(2));
        let topics = BTreeMap::from([(t1, 4), (t2, 3)]);
        let members = [
            member("a", &[t1, t2], None),
            member("b", &[t1], None),
            member("c", &[t2], None),
        ];
        let out = assign(&members, &topics);
        let on = |id: &str, t: Uuid| out[id].get(&t).map_or(0, BTreeSet::len);
        assert_eq!(on("a", t1) + on("b", t1), 4);
        assert!(on("a", t1).abs_diff(on("b", t1)) <= 1);
        assert_eq!(on("a", t2) + on("c", t2), 3);
        assert!(on("a", t2).abs_diff(on("c", t2)) <= 1);
        assert_eq!(
            on("b", t2) + on("c", t1),
            0,
            "nothing outside a subscription"
        );
        // More subscribers than partitions of a topic: it is shared.
        let members = [
            member("a", &[t1, t2], None),
            member("b", &[t2], None),
            member("c", &[t2], None),
            member("d", &[t2], None),
            member("e", &[t2], None),
        ];
        let out = assign(&members, &topics);
        let shared = sharing(&out);
        assert!((0..3).all(|p| shared[&(t2, p)] == 2), "{shared:?}");
        assert_eq!(out["a"].get(&t1).map_or(0, BTreeSet::len), 4);
    }

    #[test]
    fn no_members_or_no_partitions() {
        assert!(assign(&[], &BTreeMap::new()).is_empty());
        let t = topic(1);
        let out = assign(&[member("a", &[t], None)], &BTreeMap::new());
        assert_eq!(count(&out["a"]), 0);
    }
}
