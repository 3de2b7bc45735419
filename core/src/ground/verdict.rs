//! Whether a request as a whole is over its limits, from what each counter said. The core's
//! charging (`core::decision::charging`) asks this between evaluating every counter and charging any: by
//! default a request that is over charges nothing (all-or-nothing), one that passes charges
//! every counter that admitted it; with `--charge every-descriptor` each descriptor is judged so
//! on its own.
//!
//! The Redis scripts carry the same rule in Lua; keep them in step.

/// How a counter's rejection counts toward the request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Rejecting it rejects the request.
    Enforced,
    /// `quota_mode`: the request is rejected only when every quota descriptor is over.
    Quota,
    /// `shadow_mode`: evaluated and reported, never rejects.
    Shadow,
}

/// One counter's say: which descriptor it belongs to, its role, and whether it admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vote {
    pub descriptor: usize,
    pub role: Role,
    pub admitted: bool,
}

/// Whether the request is over its limits (`global_shadow`: `--shadow-mode`, answer OK anyway).
/// Counters of one descriptor come together; a descriptor is over when any of its counters is.
pub fn request_over_limit(votes: &[Vote], global_shadow: bool) -> bool {
    !global_shadow && over_limit_ignoring_global_shadow(votes)
}

/// The verdict before global shadow mode turns it into OK (what shadow mode would have done).
pub fn over_limit_ignoring_global_shadow(votes: &[Vote]) -> bool {
    let mut enforced_over = false;
    let mut quota_descriptors = 0usize;
    let mut quota_descriptors_over = 0usize;
    let mut index = 0;
    while let Some(first) = votes.get(index) {
        let descriptor_votes = votes[index..]
            .iter()
            .take_while(|vote| vote.descriptor == first.descriptor);
        let mut over = false;
        let mut count = 0;
        for vote in descriptor_votes {
            over |= !vote.admitted;
            count += 1;
        }
        match first.role {
            Role::Enforced => enforced_over |= over,
            Role::Quota => {
                quota_descriptors += 1;
                quota_descriptors_over += usize::from(over);
            }
            Role::Shadow => {}
        }
        index += count;
    }
    enforced_over || (quota_descriptors > 0 && quota_descriptors_over == quota_descriptors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(descriptor: usize, role: Role, admitted: bool) -> Vote {
        Vote {
            descriptor,
            role,
            admitted,
        }
    }

    #[test]
    fn any_enforced_rejection_rejects() {
        let votes = [
            vote(0, Role::Enforced, true),
            vote(1, Role::Enforced, false),
        ];
        assert!(request_over_limit(&votes, false));
        assert!(!request_over_limit(&votes, true));
        assert!(!request_over_limit(&votes[..1], false));
    }

    #[test]
    fn one_rejected_limit_rejects_its_descriptor() {
        let votes = [
            vote(0, Role::Enforced, true),
            vote(0, Role::Enforced, false),
        ];
        assert!(request_over_limit(&votes, false));
    }

    #[test]
    fn shadow_never_rejects() {
        assert!(!request_over_limit(&[vote(0, Role::Shadow, false)], false));
    }

    #[test]
    fn quota_rejects_only_when_every_quota_descriptor_is_over() {
        let some = [vote(0, Role::Quota, false), vote(1, Role::Quota, true)];
        assert!(!request_over_limit(&some, false));
        let all = [vote(0, Role::Quota, false), vote(1, Role::Quota, false)];
        assert!(request_over_limit(&all, false));
        let mixed = [vote(0, Role::Quota, true), vote(1, Role::Enforced, false)];
        assert!(request_over_limit(&mixed, false));
    }
}
