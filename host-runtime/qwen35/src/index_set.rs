//! A set of indices below a bound, each listed once, in the order first inserted: an
//! insert is a flag test, and clearing costs what was inserted, not the bound. The
//! activation-sparse products note the rows a step reached with it; the engines note
//! the GDN state rows a step wrote.

#[derive(Debug, Clone)]
pub struct IndexSet {
    marked: Vec<bool>,
    list: Vec<usize>,
}

impl IndexSet {
    /// An empty set of indices below `bound`.
    pub fn new(bound: usize) -> Self {
        Self {
            marked: vec![false; bound],
            list: Vec::new(),
        }
    }

    #[inline]
    pub fn insert(&mut self, i: usize) {
        if !self.marked[i] {
            self.marked[i] = true;
            self.list.push(i);
        }
    }

    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        self.marked[i]
    }

    /// The indices, in the order first inserted.
    pub fn as_slice(&self) -> &[usize] {
        &self.list
    }

    pub fn clear(&mut self) {
        for &i in &self.list {
            self.marked[i] = false;
        }
        self.list.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_index_once_and_clears_what_it_holds() {
        let mut set = IndexSet::new(8);
        for i in [5, 2, 5, 7, 2] {
            set.insert(i);
        }
        assert_eq!(set.as_slice(), &[5, 2, 7]);
        assert!(set.contains(7) && !set.contains(0));
        set.clear();
        assert!(set.as_slice().is_empty() && !set.contains(5));
    }
}
