//! The policies of `make_static` annotations (DyC's; `docs/language.md`).
//!
//! Policies come in groups; at most one policy of each group may be given on one
//! annotation. A group left unset takes its default, which the consumer decides
//! (`cache_all`, `poly_divide`... see `docs/language.md`); the IR keeps exactly what the
//! user wrote so that `explain` and the printer can show it.

use std::fmt;
use thin_vec::ThinVec;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    CacheAll,
    CacheAllUnchecked,
    CacheOne,
    CacheOneUnchecked,
    Replicate,
    PolyDivide,
    MonoDivide,
    PolySpecialize,
    MonoSpecialize,
    AutoPromote,
    ManualPromote,
    Eager,
    Lazy,
    SpecializeLazy,
    PromoteLazy,
    LoopSpecializeLazy,
}

/// The group a policy belongs to; one policy per group on an annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyGroup {
    Caching,
    Division,
    Specialization,
    Promotion,
    Laziness,
}

impl Policy {
    pub const ALL: [Policy; 16] = [
        Policy::CacheAll,
        Policy::CacheAllUnchecked,
        Policy::CacheOne,
        Policy::CacheOneUnchecked,
        Policy::Replicate,
        Policy::PolyDivide,
        Policy::MonoDivide,
        Policy::PolySpecialize,
        Policy::MonoSpecialize,
        Policy::AutoPromote,
        Policy::ManualPromote,
        Policy::Eager,
        Policy::Lazy,
        Policy::SpecializeLazy,
        Policy::PromoteLazy,
        Policy::LoopSpecializeLazy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::CacheAll => "cache_all",
            Policy::CacheAllUnchecked => "cache_all_unchecked",
            Policy::CacheOne => "cache_one",
            Policy::CacheOneUnchecked => "cache_one_unchecked",
            Policy::Replicate => "replicate",
            Policy::PolyDivide => "poly_divide",
            Policy::MonoDivide => "mono_divide",
            Policy::PolySpecialize => "poly_specialize",
            Policy::MonoSpecialize => "mono_specialize",
            Policy::AutoPromote => "auto_promote",
            Policy::ManualPromote => "manual_promote",
            Policy::Eager => "eager",
            Policy::Lazy => "lazy",
            Policy::SpecializeLazy => "specialize_lazy",
            Policy::PromoteLazy => "promote_lazy",
            Policy::LoopSpecializeLazy => "loop_specialize_lazy",
        }
    }

    pub fn from_name(s: &str) -> Option<Policy> {
        Policy::ALL.iter().copied().find(|p| p.name() == s)
    }

    pub fn group(self) -> PolicyGroup {
        use Policy::*;
        match self {
            CacheAll | CacheAllUnchecked | CacheOne | CacheOneUnchecked | Replicate => {
                PolicyGroup::Caching
            }
            PolyDivide | MonoDivide => PolicyGroup::Division,
            PolySpecialize | MonoSpecialize => PolicyGroup::Specialization,
            AutoPromote | ManualPromote => PolicyGroup::Promotion,
            Eager | Lazy | SpecializeLazy | PromoteLazy | LoopSpecializeLazy => {
                PolicyGroup::Laziness
            }
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The policies written on one `make_static`, kept sorted by group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Policies(ThinVec<Policy>);

/// Two policies of the same group on one annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyConflict(pub Policy, pub Policy);

impl Policies {
    /// Builds a policy set, refusing two policies of one group.
    pub fn new(list: &[Policy]) -> Result<Policies, PolicyConflict> {
        let mut v: ThinVec<Policy> = ThinVec::with_capacity(list.len());
        for &p in list {
            if let Some(&q) = v.iter().find(|q| q.group() == p.group()) {
                return Err(PolicyConflict(q, p));
            }
            v.push(p);
        }
        v.sort_by_key(|p| p.group());
        Ok(Policies(v))
    }

    pub fn iter(&self) -> impl Iterator<Item = Policy> + '_ {
        self.0.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The policy given for `group`, if any.
    pub fn get(&self, group: PolicyGroup) -> Option<Policy> {
        self.iter().find(|p| p.group() == group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_conflicts_are_refused() {
        for p in Policy::ALL {
            assert_eq!(Policy::from_name(p.name()), Some(p));
        }
        let ps = Policies::new(&[Policy::Lazy, Policy::CacheOne]).unwrap();
        assert_eq!(
            ps.iter().collect::<Vec<_>>(),
            [Policy::CacheOne, Policy::Lazy]
        );
        assert_eq!(ps.get(PolicyGroup::Laziness), Some(Policy::Lazy));
        assert_eq!(
            Policies::new(&[Policy::Eager, Policy::Lazy]),
            Err(PolicyConflict(Policy::Eager, Policy::Lazy))
        );
    }
}
