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

/// A directed graph over dense node numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub succs: Vec<Vec<usize>>,
    pub preds: Vec<Vec<usize>>,
}

impl Graph {
    /// A graph with `n` nodes and the given edges (repeated edges are kept once).
    pub fn from_edges(n: usize, edges: impl IntoIterator<Item = (usize, usize)>) -> Graph {
        let mut g = Graph {
            succs: vec![Vec::new(); n],
            preds: vec![Vec::new(); n],
        };
        let mut seen = rustc_hash::FxHashSet::default();
        for (a, b) in edges {
            if seen.insert((a, b)) {
                g.add_edge(a, b);
            }
        }
        g
    }

    pub fn len(&self) -> usize {
        self.succs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.succs.is_empty()
    }

    pub fn add_node(&mut self) -> usize {
        self.succs.push(Vec::new());
        self.preds.push(Vec::new());
        self.succs.len() - 1
    }

    /// Adds the edge `a -> b`, which must not be in the graph yet (a repeated edge would be
    /// kept twice); constant time.
    pub fn add_edge(&mut self, a: usize, b: usize) {
        self.succs[a].push(b);
        self.preds[b].push(a);
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
        self.succs
            .iter()
            .enumerate()
            .flat_map(|(a, ss)| ss.iter().map(move |&b| (a, b)))
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
        let mut graph = Graph::from_edges(n, []);
        // The last node each node was entered from, so that a repeated edge (a switch with
        // many cases to one block) is dropped in constant time.
        let mut entered_from = vec![usize::MAX; n];
        for (i, &b) in numbering.blocks.iter().enumerate() {
            for s in f.successors(b) {
                if let Some(j) = numbering.node(s) {
                    if entered_from[j] != i {
                        entered_from[j] = i;
                        graph.add_edge(i, j);
                    }
                }
            }
        }
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
