/* What a thread makes for itself once and keeps while it lives (a table, a
 * scratch buffer, a descriptor), handed back when the thread ends: one
 * static fc_thread_exit per kind, armed by each thread that made one.
 * Header only: libncclsim-host.so, which links no common code, uses it too. */
#ifndef NCCLSIM_COMMON_THREAD_EXIT_H
#define NCCLSIM_COMMON_THREAD_EXIT_H

#include <pthread.h>
#include <stdbool.h>

typedef struct {
    void (*release)(void *); /* called with what the thread armed, as it ends */
    pthread_mutex_t lock;
    pthread_key_t key;
    int state; /* 0: no key yet; 1: made; -1: none could be made */
} fc_thread_exit;

#define FC_THREAD_EXIT_INIT(release_fn) {(release_fn), PTHREAD_MUTEX_INITIALIZER, 0, 0}

/* Have e->release(arg) called when the calling thread ends (arg not NULL).
 * false: it cannot be arranged, and the thread should not keep arg. */
static inline bool fc_thread_exit_arm(fc_thread_exit *e, void *arg)
{
    int state = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    if (!state) {
        pthread_mutex_lock(&e->lock);
        if (!(state = e->state)) {
            state = pthread_key_create(&e->key, e->release) == 0 ? 1 : -1;
            __atomic_store_n(&e->state, state, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&e->lock);
    }
    return state > 0 && pthread_setspecific(e->key, arg) == 0;
}

#endif
