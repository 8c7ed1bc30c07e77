/* The intrusive doubly linked list of the tree: each element embeds an rt_list node; a list
 * is a sentinel node (its head) that points at itself when empty, so inserting and removing
 * take no branch on the ends. A head must not be copied once initialised (its neighbours
 * point at it). No locking: whoever owns the list guards it.
 *
 * The lowest layer: any folder may include this header; it includes only the C library. */
#ifndef RT_LIST_H
#define RT_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rt_list {
  struct rt_list *prev, *next;
} rt_list;

/* An empty list, or a node linked nowhere (removing it does nothing). */
static inline void rt_list_init(rt_list *head) {
  head->prev = head->next = head;
}

static inline bool rt_list_empty(const rt_list *head) {
  return head->next == head;
}

static inline void rt_list_insert_after(rt_list *at, rt_list *node) {
  node->next = at->next;
  node->prev = at;
  at->next->prev = node;
  at->next = node;
}

static inline void rt_list_push_front(rt_list *head, rt_list *node) {
  rt_list_insert_after(head, node);
}

static inline void rt_list_push_back(rt_list *head, rt_list *node) {
  rt_list_insert_after(head->prev, node);
}

/* Unlinks node from its list; it is left linked nowhere. */
static inline void rt_list_remove(rt_list *node) {
  node->prev->next = node->next;
  node->next->prev = node->prev;
  rt_list_init(node);
}

/* The node after / before `node` in the list at `head`, NULL past the ends (node == head:
 * the first / the last). */
static inline rt_list *rt_list_after(const rt_list *head, const rt_list *node) {
  return node->next == head ? NULL : node->next;
}

static inline rt_list *rt_list_before(const rt_list *head, const rt_list *node) {
  return node->prev == head ? NULL : node->prev;
}

static inline void *rt_list_item_(rt_list *node, size_t offset) {
  return node ? (char *)node - offset : NULL;
}

/* The element of type `type` whose rt_list field `member` is `node` (NULL for NULL). */
#define RT_LIST_ITEM(node, type, member) ((type *)rt_list_item_((node), offsetof(type, member)))
/* The first / last element, the one after / before element `e`; NULL past the ends. */
#define RT_LIST_FIRST(head, type, member) RT_LIST_ITEM(rt_list_after((head), (head)), type, member)
#define RT_LIST_LAST(head, type, member) RT_LIST_ITEM(rt_list_before((head), (head)), type, member)
#define RT_LIST_NEXT(e, head, type, member)                                                        \
  RT_LIST_ITEM(rt_list_after((head), &(e)->member), type, member)
#define RT_LIST_PREV(e, head, type, member)                                                        \
  RT_LIST_ITEM(rt_list_before((head), &(e)->member), type, member)

/* Each element `e` (declared here as `type *`) in order. The body must not remove `e`: loop
 * with RT_LIST_FIRST/RT_LIST_NEXT, taking the next one first, for that. */
#define RT_LIST_FOR_EACH(type, e, head, member)                                                    \
  for (type *e = RT_LIST_FIRST(head, type, member); e != NULL;                                     \
       e = RT_LIST_NEXT(e, head, type, member))

#endif
