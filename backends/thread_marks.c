/* The calling thread's state as the backends found it (backend.h: be_thread_marks). */
#include "backends/backend.h"

void be_thread_marks_take(be_thread_marks *t) {
  t->n = 0;
  for (const be_entry *e = be_registry(); e->name != NULL; e++)
    if (e->ops != NULL && e->ops->thread_enter != NULL && t->n < BE_THREAD_MARKS) {
      t->be[t->n] = e->ops;
      t->saved[t->n++] = e->ops->thread_enter();
    }
}

void be_thread_marks_give_back(const be_thread_marks *t) {
  for (int k = t->n - 1; k >= 0; k--)
    t->be[k]->thread_leave(t->saved[k]);
}
