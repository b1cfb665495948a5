/* An open-addressing table (linear probing, backward-shift deletion) under one mutex:
 * programs at MPI_THREAD_MULTIPLE may start and complete requests from several threads,
 * and the table is touched once per nonblocking receive, not per byte. */
#include "requests.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct req_entry *slots;
static size_t cap, used;

static size_t slot_of(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static struct req_entry *find(uint64_t key) {
    if (!cap) return NULL;
    for (size_t i = slot_of(key);; i = (i + 1) & (cap - 1)) {
        if (slots[i].key == key) return &slots[i];
        if (slots[i].key == 0) return NULL;
    }
}

static void insert(struct req_entry e) {
    size_t i = slot_of(e.key);
    while (slots[i].key != 0 && slots[i].key != e.key) i = (i + 1) & (cap - 1);
    if (slots[i].key == 0) used++;
    slots[i] = e;
}

/* Kept at most half full, so probes stay short and an empty slot always ends them. */
static int grow(void) {
    if (cap && (used + 1) * 2 <= cap) return 1;
    size_t ncap = cap ? cap * 2 : 1024;
    struct req_entry *old = slots, *fresh = calloc(ncap, sizeof *fresh);
    if (!fresh) return 0;
    size_t ocap = cap;
    slots = fresh;
    cap = ncap;
    used = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key) insert(old[i]);
    free(old);
    return 1;
}

void req_put(uint64_t key, enum req_kind kind, int32_t src, int32_t tag, int active) {
    if (!key) return;
    struct req_entry e = {key, (uint8_t)kind, (uint8_t)active, 0, src, tag};
    pthread_mutex_lock(&lock);
    /* Out of memory: the request goes unfollowed, which only ever undercounts
     * deliveries (a deadlock missed, never one invented). */
    if (grow()) insert(e);
    pthread_mutex_unlock(&lock);
}

struct req_entry req_get(uint64_t key) {
    struct req_entry e;
    memset(&e, 0, sizeof e);
    if (!key) return e;
    pthread_mutex_lock(&lock);
    struct req_entry *p = find(key);
    if (p) e = *p;
    pthread_mutex_unlock(&lock);
    return e;
}

void req_set_active(uint64_t key, int active) {
    pthread_mutex_lock(&lock);
    struct req_entry *p = find(key);
    if (p) {
        p->active = (uint8_t)active;
        p->cancelled = 0;
    }
    pthread_mutex_unlock(&lock);
}

void req_cancelled(uint64_t key) {
    pthread_mutex_lock(&lock);
    struct req_entry *p = find(key);
    if (p) p->cancelled = 1;
    pthread_mutex_unlock(&lock);
}

static void remove_at(struct req_entry *p);

void req_remove(uint64_t key) {
    pthread_mutex_lock(&lock);
    struct req_entry *p = find(key);
    if (p) remove_at(p);
    pthread_mutex_unlock(&lock);
}

struct req_entry req_complete(uint64_t key) {
    struct req_entry e;
    memset(&e, 0, sizeof e);
    if (!key) return e;
    pthread_mutex_lock(&lock);
    struct req_entry *p = find(key);
    if (p) {
        e = *p;
        if (p->kind == REQ_RECV)
            remove_at(p);
        else
            p->active = 0;
    }
    pthread_mutex_unlock(&lock);
    return e;
}

static void remove_at(struct req_entry *p) {
    size_t i = (size_t)(p - slots);
    slots[i].key = 0;
    used--;
    /* Backward shift: move later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & (cap - 1); slots[j].key; j = (j + 1) & (cap - 1)) {
        size_t home = slot_of(slots[j].key);
        int between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            slots[i] = slots[j];
            slots[j].key = 0;
            i = j;
        }
    }
}
