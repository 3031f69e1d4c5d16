//! Dependencies between the workloads of one application (seed 002): start
//! order, cycle detection and "who depends on me".

use super::workload::Workload;
use std::collections::{BTreeMap, BTreeSet};

/// The `dependsOn` graph of an application's workloads, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyGraph {
    names: Vec<String>,
    /// `deps[i]`: indices workload `i` depends on (sorted, unknown names dropped).
    deps: Vec<Vec<usize>>,
}

impl DependencyGraph {
    /// Builds the graph; names in `dependsOn` that match no workload are
    /// ignored here (validation reports them).
    pub fn new(workloads: &[Workload]) -> Self {
        let index: BTreeMap<&str, usize> = workloads
            .iter()
            .enumerate()
            .map(|(i, w)| (w.name.as_str(), i))
            .collect();
        let deps = workloads
            .iter()
            .map(|w| {
                let set: BTreeSet<usize> = w
                    .depends_on
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied())
                    .collect();
                set.into_iter().collect()
            })
            .collect();
        Self {
            names: workloads.iter().map(|w| w.name.clone()).collect(),
            deps,
        }
    }

    /// Indices workload `i` depends on directly.
    pub fn deps_of(&self, i: usize) -> &[usize] {
        self.deps.get(i).map(Vec::as_slice).unwrap_or(&[])
    }

    /// A dependency cycle as workload names, first name repeated at the
    /// end (`["a", "b", "a"]`), or `None` when the graph is acyclic.
    pub fn find_cycle(&self) -> Option<Vec<String>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Active,
            Done,
        }
        let n = self.names.len();
        let mut mark = vec![Mark::New; n];
        let mut stack: Vec<usize> = Vec::new();
        fn visit(
            g: &DependencyGraph,
            i: usize,
            mark: &mut [Mark],
            stack: &mut Vec<usize>,
        ) -> Option<Vec<String>> {
            mark[i] = Mark::Active;
            stack.push(i);
            for &d in g.deps_of(i) {
                match mark[d] {
                    Mark::Active => {
                        let start = stack.iter().position(|&s| s == d).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            stack[start..].iter().map(|&s| g.names[s].clone()).collect();
                        cycle.push(g.names[d].clone());
                        return Some(cycle);
                    }
                    Mark::New => {
                        if let Some(c) = visit(g, d, mark, stack) {
                            return Some(c);
                        }
                    }
                    Mark::Done => {}
                }
            }
            stack.pop();
            mark[i] = Mark::Done;
            None
        }
        for i in 0..n {
            if mark[i] == Mark::New
                && let Some(c) = visit(self, i, &mut mark, &mut stack)
            {
                return Some(c);
            }
        }
        None
    }

    /// Workload indices with every dependency before its dependents; ties
    /// keep spec order. `None` when there is a cycle.
    pub fn start_order(&self) -> Option<Vec<usize>> {
        let n = self.names.len();
        let mut remaining: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, ds) in self.deps.iter().enumerate() {
            for &d in ds {
                dependents[d].push(i);
            }
        }
        let mut ready: BTreeSet<usize> = (0..n).filter(|&i| remaining[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &j in &dependents[i] {
                remaining[j] -= 1;
                if remaining[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        (order.len() == n).then_some(order)
    }

    /// Every workload that depends on `i`, directly or through others.
    pub fn transitive_dependents(&self, i: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut frontier = vec![i];
        while let Some(x) = frontier.pop() {
            for (j, ds) in self.deps.iter().enumerate() {
                if ds.contains(&x) && out.insert(j) {
                    frontier.push(j);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::runtime::{OsType, RuntimeRequirement, RuntimeType};

    fn w(name: &str, deps: &[&str]) -> Workload {
        let mut w = Workload::new(
            name,
            RuntimeRequirement {
                runtime_type: RuntimeType::Process,
                os: OsType::Linux,
            },
        );
        w.depends_on = deps.iter().map(|s| s.to_string()).collect();
        w
    }

    #[test]
    fn order_and_dependents() {
        let g =
            DependencyGraph::new(&[w("worker", &["db", "web"]), w("web", &["db"]), w("db", &[])]);
        assert_eq!(g.find_cycle(), None);
        assert_eq!(g.start_order(), Some(vec![2, 1, 0]));
        assert_eq!(g.transitive_dependents(2), BTreeSet::from([0, 1]));
    }

    #[test]
    fn cycle_is_named() {
        let g =
            DependencyGraph::new(&[w("a", &["b"]), w("b", &["c"]), w("c", &["a"]), w("d", &[])]);
        assert_eq!(g.find_cycle().unwrap(), ["a", "b", "c", "a"]);
        assert_eq!(g.start_order(), None);
    }
}
