//! Successors and predecessors.
//!
//! The CFG is derived from the terminators of the blocks in the layout, never stored in the
//! IR (keeping edges by hand inside the IR is a known source of bugs). Blocks are numbered
//! densely in layout order (the entry is node 0), so that the algorithms of this module
//! work on plain `usize` nodes in a [`Graph`] and can run unchanged on reversed or
//! augmented graphs (post-dominators add a virtual exit).
//!
//! Successor lists keep branch order and drop repetitions (a `brif` whose arms go to one
//! block is one edge). Edges to blocks that are not in the layout are ignored (the verifier
//! reports them). Cost: O(blocks + edges).

use cranelift_entity::SecondaryMap;

use crate::ir::{Block, Function};

/// Adjacency lists of every node in one array (compressed sparse rows): `adj[n]` is the
/// list of node `n`, a slice. Two allocations however many nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adjacency {
    /// `start[n]..start[n + 1]` indexes node `n`'s list in `items`.
    start: Vec<u32>,
    items: Vec<usize>,
}

impl Adjacency {
    /// The lists of `n` nodes holding, for every pair `(node, item)` of `pairs` in order,
    /// `item` in `node`'s list (a stable counting sort: each list keeps the pairs' order).
    pub fn build(n: usize, pairs: impl Iterator<Item = (usize, usize)> + Clone) -> Adjacency {
        let mut start = vec![0u32; n + 1];
        for (node, _) in pairs.clone() {
            start[node + 1] += 1;
        }
        for k in 0..n {
            start[k + 1] += start[k];
        }
        let mut fill = start.clone();
        let mut items = vec![0; start[n] as usize];
        for (node, item) in pairs {
            items[fill[node] as usize] = item;
            fill[node] += 1;
        }
        Adjacency { start, items }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::ops::Index<usize> for Adjacency {
    type Output = [usize];

    fn index(&self, n: usize) -> &[usize] {
        &self.items[self.start[n] as usize..self.start[n + 1] as usize]
    }
}

/// A directed graph over dense node numbers, immutable once built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub succs: Adjacency,
    pub preds: Adjacency,
}

impl Graph {
    /// A graph with `n` nodes and the given edges (repeated edges are kept once).
    pub fn from_edges(n: usize, edges: impl IntoIterator<Item = (usize, usize)>) -> Graph {
        let mut seen = rustc_hash::FxHashSet::default();
        let unique: Vec<(usize, usize)> = edges.into_iter().filter(|&e| seen.insert(e)).collect();
        Graph::from_unique_edges(n, &unique)
    }

    /// A graph with `n` nodes and the given edges, none repeated; linear time. Successor
    /// and predecessor lists keep the order of `edges`.
    pub fn from_unique_edges(n: usize, edges: &[(usize, usize)]) -> Graph {
        Graph {
            succs: Adjacency::build(n, edges.iter().copied()),
            preds: Adjacency::build(n, edges.iter().map(|&(a, b)| (b, a))),
        }
    }

    pub fn len(&self) -> usize {
        self.succs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.succs.is_empty()
    }

    /// The same nodes with every edge reversed.
    pub fn reversed(&self) -> Graph {
        Graph {
            succs: self.preds.clone(),
            preds: self.succs.clone(),
        }
    }

    /// All edges, in node order then successor order.
    pub fn edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.len()).flat_map(move |a| self.succs[a].iter().map(move |&b| (a, b)))
    }
}

/// The dense numbering of the blocks in a layout (node `n` is the `n`-th block).
#[derive(Clone, Debug, Default)]
pub struct BlockNumbering {
    blocks: Vec<Block>,
    index: SecondaryMap<Block, Option<u32>>,
}

impl BlockNumbering {
    pub fn new(blocks: &[Block]) -> BlockNumbering {
        let mut index = SecondaryMap::new();
        for (i, &b) in blocks.iter().enumerate() {
            index[b] = Some(i as u32);
        }
        BlockNumbering {
            blocks: blocks.to_vec(),
            index,
        }
    }

    /// The dense number of `b`, `None` if it is not in the layout.
    pub fn node(&self, b: Block) -> Option<usize> {
        self.index.get(b).copied().flatten().map(|i| i as usize)
    }

    pub fn block(&self, n: usize) -> Block {
        self.blocks[n]
    }

    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
}

/// The control-flow graph of a function.
#[derive(Clone, Debug)]
pub struct ControlFlowGraph {
    numbering: BlockNumbering,
    graph: Graph,
}

impl ControlFlowGraph {
    pub fn compute(f: &Function) -> ControlFlowGraph {
        let numbering = BlockNumbering::new(f.layout.blocks());
        let n = numbering.blocks.len();
        // The last node each node was entered from, so that a repeated edge (a switch with
        // many cases to one block) is dropped in constant time.
        let mut entered_from = vec![usize::MAX; n];
        let mut edges = Vec::new();
        for (i, &b) in numbering.blocks.iter().enumerate() {
            for s in f.successors(b) {
                if let Some(j) = numbering.node(s) {
                    if entered_from[j] != i {
                        entered_from[j] = i;
                        edges.push((i, j));
                    }
                }
            }
        }
        let graph = Graph::from_unique_edges(n, &edges);
        ControlFlowGraph { numbering, graph }
    }

    /// The dense graph (node `n` is `self.block(n)`; the entry is node 0).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn numbering(&self) -> &BlockNumbering {
        &self.numbering
    }

    pub fn num_blocks(&self) -> usize {
        self.numbering.blocks.len()
    }

    /// Blocks in layout order.
    pub fn blocks(&self) -> &[Block] {
        &self.numbering.blocks
    }

    pub fn block(&self, n: usize) -> Block {
        self.numbering.blocks[n]
    }

    /// The dense number of `b`, `None` if it is not in the layout.
    pub fn node(&self, b: Block) -> Option<usize> {
        self.numbering.node(b)
    }

    fn node_of(&self, b: Block) -> usize {
        self.node(b)
            .unwrap_or_else(|| panic!("{b} is not in the layout of the analysed function"))
    }

    pub fn succs(&self, b: Block) -> impl Iterator<Item = Block> + '_ {
        self.graph.succs[self.node_of(b)]
            .iter()
            .map(|&n| self.numbering.blocks[n])
    }

    pub fn preds(&self, b: Block) -> impl Iterator<Item = Block> + '_ {
        self.graph.preds[self.node_of(b)]
            .iter()
            .map(|&n| self.numbering.blocks[n])
    }
}
