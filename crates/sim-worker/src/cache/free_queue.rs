//! An index-based intrusive doubly linked list of block ids: vLLM's
//! `FreeKVCacheBlockQueue`. O(1) push to the tail, pop from the head and
//! removal from the middle (when a free cached block is reused).

use crate::InvariantViolation;

#[derive(Debug, Clone, Copy, Default)]
struct Link {
    prev: Option<usize>,
    next: Option<usize>,
    linked: bool,
}

/// The free blocks in eviction order: the head is evicted first.
#[derive(Debug, Clone)]
pub(super) struct FreeQueue {
    links: Vec<Link>,
    head: Option<usize>,
    tail: Option<usize>,
    len: usize,
}

impl FreeQueue {
    /// A queue over block ids `0..n` holding all of them, in id order (as
    /// vLLM's pool starts).
    pub(super) fn full(n: usize) -> Self {
        let mut queue = FreeQueue {
            links: vec![Link::default(); n],
            head: None,
            tail: None,
            len: 0,
        };
        for id in 0..n {
            queue.push_back(id);
        }
        queue
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn contains(&self, id: usize) -> bool {
        self.links.get(id).is_some_and(|l| l.linked)
    }

    /// Appends `id` at the tail (evicted last). No-op if already queued.
    pub(super) fn push_back(&mut self, id: usize) {
        let old_tail = self.tail;
        let Some(link) = self.links.get_mut(id) else {
            return;
        };
        if link.linked {
            return;
        }
        *link = Link {
            prev: old_tail,
            next: None,
            linked: true,
        };
        match old_tail {
            Some(t) => self.links[t].next = Some(id),
            None => self.head = Some(id),
        }
        self.tail = Some(id);
        self.len += 1;
    }

    /// Removes and returns the head (the next block to evict).
    pub(super) fn pop_front(&mut self) -> Option<usize> {
        let head = self.head?;
        self.remove(head);
        Some(head)
    }

    /// Unlinks `id` wherever it is. Returns whether it was queued.
    pub(super) fn remove(&mut self, id: usize) -> bool {
        let Some(&link) = self.links.get(id) else {
            return false;
        };
        if !link.linked {
            return false;
        }
        match link.prev {
            Some(p) => self.links[p].next = link.next,
            None => self.head = link.next,
        }
        match link.next {
            Some(n) => self.links[n].prev = link.prev,
            None => self.tail = link.prev,
        }
        self.links[id] = Link::default();
        self.len -= 1;
        true
    }

    /// The queued ids from head to tail. O(len); for checks and diagnostics.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.head, |&id| self.links[id].next)
    }

    /// Checks that the links form one consistent chain of `len` nodes.
    pub(super) fn check(&self) -> Result<(), InvariantViolation> {
        let fail = |msg: String| Err(InvariantViolation(format!("free queue: {msg}")));
        let mut prev = None;
        let mut count = 0;
        let mut cursor = self.head;
        while let Some(id) = cursor {
            let link = self.links[id];
            if !link.linked || link.prev != prev {
                return fail(format!("block {id} has a broken back link"));
            }
            count += 1;
            if count > self.links.len() {
                return fail("cycle".into());
            }
            prev = Some(id);
            cursor = link.next;
        }
        if self.tail != prev {
            return fail("tail is not the last node".into());
        }
        let linked = self.links.iter().filter(|l| l.linked).count();
        if count != self.len || linked != self.len {
            return fail(format!(
                "len {} but {count} reachable and {linked} linked",
                self.len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_remove_keep_order() {
        let mut q = FreeQueue::full(5);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        assert!(q.remove(2));
        assert!(!q.remove(2));
        assert_eq!(q.pop_front(), Some(0));
        q.push_back(0);
        q.push_back(0);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![1, 3, 4, 0]);
        assert!(q.remove(0) && q.remove(4));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(q.len(), 2);
        assert!(q.contains(3) && !q.contains(2) && !q.contains(99));
        q.check().unwrap();
        while q.pop_front().is_some() {}
        assert_eq!(q.len(), 0);
        q.check().unwrap();
        q.push_back(4);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![4]);
        q.check().unwrap();
    }
}
