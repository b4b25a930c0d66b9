//! The server-side partition assignors of KIP-848 consumer groups (`group.consumer.assignors`):
//! `uniform`, Kafka's default, which balances partition counts across members and keeps each
//! member's partitions where it can (sticky), and `range`, which gives each subscribed member a
//! contiguous range of every topic in member-id order, so that co-partitioned topics line up.
//!
//! Pure functions: members' subscriptions (topic ids), their current target assignment and the
//! topics' partition counts in, the new target assignment out. Nothing here knows topic names,
//! epochs or time; the consumer group state machine (`consumer_group.rs`) calls [`assign`]
//! whenever the group epoch moves past the assignment epoch.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Balancing passes of the uniform assignor at most (each pass moves every partition that can
/// go to a less-loaded subscriber; a handful of passes settle any group).
const BALANCE_PASSES_MAX: usize = 64;

/// Partitions by topic id: a member's assignment, or a request's owned partitions.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// One of the assignors a broker offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    /// The name clients send in `ServerAssignor` and DescribeConsumerGroup reports.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The assignor named `name` (as in `group.consumer.assignors`; case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("uniform") {
            Some(Assignor::Uniform)
        } else if name.eq_ignore_ascii_case("range") {
            Some(Assignor::Range)
        } else {
            None
        }
    }
}

/// A member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct AssignorMember<'a> {
    pub member_id: &'a str,
    /// The topics it subscribes to that exist.
    pub subscribed: BTreeSet<Uuid>,
    /// Its current target assignment (what stickiness keeps).
    pub current: Option<&'a Assignment>,
}

/// The new target assignment of every member (members with nothing get an empty assignment).
/// `topics` maps each subscribed topic to its partition count.
pub fn assign(
    assignor: Assignor,
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    match assignor {
        Assignor::Uniform => uniform(members, topics),
        Assignor::Range => range(members, topics),
    }
}

fn to_assignment(owned: Vec<(Uuid, i32)>) -> Assignment {
    let mut out = Assignment::new();
    for (topic, partition) in owned {
        out.entry(topic).or_default().insert(partition);
    }
    out
}

/// Per topic, members sorted by id split the partitions into contiguous ranges, the first
/// `partitions % members` getting one more.
fn range(
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut sorted: Vec<&AssignorMember<'_>> = members.iter().collect();
    sorted.sort_by(|a, b| a.member_id.cmp(b.member_id));
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    for (&topic, &count) in topics {
        let subscribers: Vec<&str> = sorted
            .iter()
            .filter(|m| m.subscribed.contains(&topic))
            .map(|m| m.member_id)
            .collect();
        let Ok(n) = i32::try_from(subscribers.len()) else {
            continue;
        };
        if n == 0 || count <= 0 {
            continue;
        }
        let (base, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in (0..).zip(subscribers) {
            let take = base + i32::from(i < extra);
            if take > 0 {
                let partitions = out
                    .entry(member.to_string())
                    .or_default()
                    .entry(topic)
                    .or_default();
                partitions.extend(next..next + take);
            }
            next += take;
        }
    }
    out
}

/// Balanced and sticky: every member keeps the partitions it has that it still subscribes to,
/// unowned partitions go to the least-loaded subscriber, then partitions move one at a time from
/// the most-loaded member to a less-loaded subscriber until no member has two more than another
/// that could take one of its partitions.
fn uniform(
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let n = members.len();
    // Per member: the partitions it owns, as (topic, partition).
    let mut owned: Vec<BTreeSet<(Uuid, i32)>> = vec![BTreeSet::new(); n];
    let mut taken: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    for (i, m) in members.iter().enumerate() {
        let Some(current) = m.current else { continue };
        for (topic, partitions) in current {
            let Some(&count) = topics.get(topic) else {
                continue;
            };
            if !m.subscribed.contains(topic) {
                continue;
            }
            for &p in partitions {
                if (0..count).contains(&p) && taken.insert((*topic, p)) {
                    owned[i].insert((*topic, p));
                }
            }
        }
    }
    // Members able to take each topic.
    let subscribers = |topic: &Uuid| -> Vec<usize> {
        (0..n)
            .filter(|&i| members[i].subscribed.contains(topic))
            .collect()
    };
    for (&topic, &count) in topics {
        let able = subscribers(&topic);
        if able.is_empty() {
            continue;
        }
        for p in 0..count {
            if taken.contains(&(topic, p)) {
                continue;
            }
            let least = able
                .iter()
                .copied()
                .min_by_key(|&i| (owned[i].len(), members[i].member_id));
            if let Some(i) = least {
                owned[i].insert((topic, p));
                taken.insert((topic, p));
            }
        }
    }
    // Balance, in passes over the members from the most loaded: each partition (highest first,
    // so members keep their low ones) moves to its least-loaded subscriber while that one has at
    // least two fewer. Each move lowers the sum of squared loads, so the passes end; the cap is a
    // guard.
    let subscribers: BTreeMap<Uuid, Vec<usize>> =
        topics.keys().map(|t| (*t, subscribers(t))).collect();
    for _ in 0..BALANCE_PASSES_MAX {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(owned[i].len()));
        let mut moved = false;
        for from in order {
            let parts: Vec<(Uuid, i32)> = owned[from].iter().rev().copied().collect();
            for (topic, p) in parts {
                let Some(able) = subscribers.get(&topic) else {
                    continue;
                };
                let to = able
                    .iter()
                    .copied()
                    .filter(|&j| j != from)
                    .min_by_key(|&j| (owned[j].len(), members[j].member_id));
                if let Some(to) = to {
                    if owned[to].len() + 1 < owned[from].len() {
                        owned[from].remove(&(topic, p));
                        owned[to].insert((topic, p));
                        moved = true;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    members
        .iter()
        .zip(owned)
        .map(|(m, o)| {
            (
                m.member_id.to_string(),
                to_assignment(o.into_iter().collect()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn member<'a>(
        id: &'a str,
        subscribed: &[Uuid],
        current: Option<&'a Assignment>,
    ) -> AssignorMember<'a> {
        AssignorMember {
            member_id: id,
            subscribed: subscribed.iter().copied().collect(),
            current,
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn all_once(out: &BTreeMap<String, Assignment>, topics: &BTreeMap<Uuid, i32>) {
        let mut seen = BTreeSet::new();
        for a in out.values() {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((*t, *p)), "{t}/{p} assigned twice");
                }
            }
        }
        let expected: usize = topics.values().map(|&c| c as usize).sum();
        assert_eq!(seen.len(), expected, "every partition assigned");
    }

    #[test]
    fn uniform_balances_and_keeps_partitions_when_a_member_joins() {
        let t = topic(1);
        let topics = BTreeMap::from([(t, 7)]);
        let first = assign(
            Assignor::Uniform,
            &[member("a", &[t], None), member("b", &[t], None)],
            &topics,
        );
        all_once(&first, &topics);
        assert_eq!(count(&first["a"]) + count(&first["b"]), 7);
        assert!(count(&first["a"]).abs_diff(count(&first["b"])) <= 1);

        let second = assign(
            Assignor::Uniform,
            &[
                member("a", &[t], Some(&first["a"])),
                member("b", &[t], Some(&first["b"])),
                member("c", &[t], None),
            ],
            &topics,
        );
        all_once(&second, &topics);
        for id in ["a", "b", "c"] {
            assert!(
                (2..=3).contains(&count(&second[id])),
                "{id}: {:?}",
                second[id]
            );
        }
        // Sticky: a and b only lost partitions, gained none.
        for id in ["a", "b"] {
            assert!(
                second[id][&t].is_subset(&first[id][&t]),
                "{id} kept its own"
            );
        }
    }

    #[test]
    fn uniform_gives_each_topic_only_to_its_subscribers() {
        let (t1, t2) = (topic(1), topic(2));
        let topics = BTreeMap::from([(t1, 4), (t2, 2)]);
        let out = assign(
            Assignor::Uniform,
            &[member("a", &[t1, t2], None), member("b", &[t1], None)],
            &topics,
        );
        all_once(&out, &topics);
        assert!(!out["b"].contains_key(&t2));
        assert_eq!(count(&out["a"]), 3);
        assert_eq!(count(&out["b"]), 3);
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let (t1, t2) = (topic(1), topic(2));
        let topics = BTreeMap::from([(t1, 5), (t2, 5)]);
        let out = assign(
            Assignor::Range,
            &[member("m2", &[t1, t2], None), member("m1", &[t1, t2], None)],
            &topics,
        );
        all_once(&out, &topics);
        let m1: Vec<i32> = out["m1"][&t1].iter().copied().collect();
        assert_eq!(m1, vec![0, 1, 2]);
        assert_eq!(out["m1"][&t1], out["m1"][&t2], "co-partitioned");
        let m2: Vec<i32> = out["m2"][&t1].iter().copied().collect();
        assert_eq!(m2, vec![3, 4]);
    }

    #[test]
    fn uniform_balances_a_large_mixed_group_from_one_owner() {
        // 300 members, 3000 partitions over 10 topics, every third member on half the topics,
        // starting from everything on one member.
        let ts: Vec<Uuid> = (1..=10).map(topic).collect();
        let topics: BTreeMap<Uuid, i32> = ts.iter().map(|t| (*t, 300)).collect();
        let mut all_on_one = Assignment::new();
        for t in &ts {
            all_on_one.insert(*t, (0..300).collect());
        }
        let ids: Vec<String> = (0..300).map(|i| format!("m{i:03}")).collect();
        let members: Vec<AssignorMember<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let subscribed: Vec<Uuid> = if i % 3 == 0 {
                    ts[..5].to_vec()
                } else {
                    ts.clone()
                };
                member(id, &subscribed, (i == 0).then_some(&all_on_one))
            })
            .collect();
        let out = assign(Assignor::Uniform, &members, &topics);
        all_once(&out, &topics);
        let counts: Vec<usize> = out.values().map(count).collect();
        let (lo, hi) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        assert!(hi - lo <= 1, "balanced: {lo}..{hi}");
    }

    #[test]
    fn no_subscribers_or_no_members_assign_nothing() {
        let t = topic(1);
        let topics = BTreeMap::from([(t, 3)]);
        assert!(assign(Assignor::Uniform, &[], &topics).is_empty());
        let out = assign(Assignor::Range, &[member("a", &[], None)], &topics);
        assert_eq!(count(&out["a"]), 0);
    }
}
