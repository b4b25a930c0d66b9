//! Goal: the simulator's checks fire — a deliberately broken configuration (unclean leader
//! election with min.insync.replicas=1; followers fetching before their appends are durable; a
//! restarted broker leading before its new registration is seen) must be caught within a few
//! seeds, naming the invariant it broke. A checker that never fires proves nothing.

use millrace_sim::{run, Broken, SimConfig};

/// Runs seeds from 0 with `broken` until one fails (at most `max`); returns the failures' texts.
fn failures(broken: Broken, max: u64, want: usize) -> Vec<String> {
    let mut found = Vec::new();
    for seed in 0..max {
        if let Some(f) = run(SimConfig::broken(seed, broken), false).failure {
            found.push(f.to_string());
            if found.len() >= want {
                break;
            }
        }
    }
    found
}

#[test]
fn unclean_election_loses_acknowledged_writes_and_is_caught() {
    let found = failures(Broken::UncleanElection, 200, 5);
    eprintln!("{found:#?}");
    assert!(
        found.iter().any(|f| f.contains("acknowledged write lost")
            || f.contains("replicas differ below the HW")
            || f.contains("high watermark went back")),
        "no seed of 200 caught the unclean election: {found:#?}"
    );
}

#[test]
fn fetching_before_durability_lets_the_hw_pass_the_durable_end_and_is_caught() {
    let found = failures(Broken::FetchBeforeDurable, 200, 5);
    eprintln!("{found:#?}");
    assert!(
        found
            .iter()
            .any(|f| f.contains("exceeds the durable log end")),
        "no seed of 200 caught followers fetching before durability: {found:#?}"
    );
}

#[test]
fn leading_without_a_current_registration_makes_two_leaders_of_one_epoch_and_is_caught() {
    let found = failures(Broken::LeadWithoutRegistration, 200, 5);
    eprintln!("{found:#?}");
    assert!(
        found.iter().any(|f| f.contains("two leaders of")),
        "no seed of 200 caught two incarnations leading one epoch: {found:#?}"
    );
}
