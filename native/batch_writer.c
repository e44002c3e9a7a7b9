/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A writer thread for BPF map batch updates (libkpr_batch_writer.so, loaded
 * through koffi like libbpf itself).
 *
 * Why: a full sync at 10,000 Services hands ~230,000 entries to
 * bpf_map_update_batch, ~0.1 s of kernel time that the agent's one JavaScript
 * thread would otherwise spend blocked. Queued here, the kernel work runs on
 * the machine's other CPU while the agent encodes the next batches.
 *
 * Order is the datapath's safety (backends before the slots that name them,
 * slots before the master that counts them), so there is exactly one thread
 * and jobs run in submission order. After a failed job every later job is
 * discarded unrun: what reached the kernel is a prefix of what was submitted,
 * which is the same guarantee as a synchronous caller that stops at the first
 * error. The error is reported by the next kpr_writer_wait(), which also
 * re-arms the writer.
 *
 * Keys and values are copied at submission, so the caller may reuse its
 * buffers at once. The copies live in pages of their own (mmap), not in the
 * C heap: a freed malloc block of a few hundred KiB raises glibc's mmap
 * threshold, after which the process's other allocations of that size stay
 * in the heap and fragment it (seen as ~10 MiB more RSS in a long run).
 * A finished job's mapping is kept for the next job (a few of them, until the
 * next kpr_writer_wait) instead of being unmapped: a full sync's ~30 jobs then
 * map and fault in a handful of regions, not one each, and the writer
 * thread's munmap (which takes the process's mmap lock, stalling the agent's
 * own page faults) runs once per sync instead of once per job.
 */
#include <bpf/bpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct kpr_job {
	struct kpr_job *next;
	uint32_t seq;
	int fd;
	uint32_t count;
	/* Bytes of one key and of one value (all CPUs' for a per-CPU map): for the one-at-a-time fallback. */
	uint32_t key_size;
	uint32_t value_size;
	uint64_t elem_flags;
	/* One mapping: the keys, then the values. */
	void *data;
	size_t data_len;
	void *keys;
	void *values;
};

/* Spare mappings kept between jobs; kpr_writer_wait unmaps them all. */
#define KPR_SPARE_MAX 4

struct kpr_spare {
	void *data;
	size_t len;
};

struct kpr_writer {
	pthread_mutex_t mu;
	pthread_cond_t work;  /* a job was queued, or stop */
	pthread_cond_t idle;  /* the queue drained */
	struct kpr_job *head, *tail;
	int running;          /* the thread is inside a job */
	int stop;
	/* First failure since the last wait: its return value (-errno), job and progress. */
	int err;
	uint32_t err_seq;
	uint32_t err_processed;
	struct kpr_spare spare[KPR_SPARE_MAX];
	int spares;
	pthread_t thread;
};

/* Called with w->mu held: keeps the job's mapping as a spare if there is room. */
static void free_job(struct kpr_writer *w, struct kpr_job *j)
{
	if (j->data) {
		if (w->spares < KPR_SPARE_MAX) {
			w->spare[w->spares].data = j->data;
			w->spare[w->spares].len = j->data_len;
			w->spares++;
		} else {
			munmap(j->data, j->data_len);
		}
	}
	free(j);
}

/* A spare mapping of at least len bytes (its length in *got), or NULL. */
static void *take_spare(struct kpr_writer *w, size_t len, size_t *got)
{
	void *data = NULL;

	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < w->spares; i++) {
		if (w->spare[i].len < len)
			continue;
		data = w->spare[i].data;
		*got = w->spare[i].len;
		w->spare[i] = w->spare[--w->spares];
		break;
	}
	pthread_mutex_unlock(&w->mu);
	return data;
}

/* Called with w->mu held and the queue drained: unmaps every spare. */
static void drop_spares(struct kpr_writer *w)
{
	while (w->spares > 0) {
		w->spares--;
		munmap(w->spare[w->spares].data, w->spare[w->spares].len);
	}
}

/* Kernel-internal ENOTSUPP: what the bpf() syscall answers for a map type without batch operations. */
#define KPR_ENOTSUPP 524

/*
 * Not every kernel batch-updates every map type (5.10's per-CPU arrays, a
 * devmap anywhere) and those answer before writing any element: the job is
 * then written one element at a time, as BpfMap.updateBatch does for a
 * synchronous caller. `*n`: elements written.
 */
static int update_one_at_a_time(const struct kpr_job *j, __u32 *n)
{
	for (uint32_t i = 0; i < j->count; i++) {
		int ret = bpf_map_update_elem(j->fd, (const char *)j->keys + (size_t)i * j->key_size,
					      (const char *)j->values + (size_t)i * j->value_size, j->elem_flags);
		if (ret < 0) {
			*n = i;
			return ret;
		}
	}
	*n = j->count;
	return 0;
}

static void *writer_main(void *arg)
{
	struct kpr_writer *w = arg;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->head && !w->stop)
			pthread_cond_wait(&w->work, &w->mu);
		if (!w->head && w->stop)
			break;
		struct kpr_job *j = w->head;
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		if (w->err) {
			free_job(w, j);
			if (!w->head)
				pthread_cond_broadcast(&w->idle);
			continue;
		}
		w->running = 1;
		pthread_mutex_unlock(&w->mu);

		LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = j->elem_flags);
		__u32 n = j->count;
		int ret = bpf_map_update_batch(j->fd, j->keys, j->values, &n, &opts);
		if ((ret == -KPR_ENOTSUPP || ret == -EOPNOTSUPP) && j->count > 0)
			ret = update_one_at_a_time(j, &n);

		pthread_mutex_lock(&w->mu);
		w->running = 0;
		if (ret < 0 && !w->err) {
			w->err = ret;
			w->err_seq = j->seq;
			w->err_processed = n;
		}
		free_job(w, j);
		if (!w->head)
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

struct kpr_writer *kpr_writer_new(void)
{
	struct kpr_writer *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
		pthread_cond_destroy(&w->idle);
		pthread_cond_destroy(&w->work);
		pthread_mutex_destroy(&w->mu);
		free(w);
		return NULL;
	}
	return w;
}

/* Queues one bpf_map_update_batch. 0, or -ENOMEM (nothing queued). */
int kpr_writer_submit(struct kpr_writer *w, uint32_t seq, int fd, const void *keys, uint32_t key_bytes,
		      const void *values, uint32_t value_bytes, uint32_t count, uint64_t elem_flags)
{
	struct kpr_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	size_t need = (size_t)key_bytes + value_bytes;

	if (need == 0)
		need = 1;
	j->data = take_spare(w, need, &j->data_len);
	if (!j->data) {
		j->data_len = need;
		j->data = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (j->data == MAP_FAILED) {
			free(j);
			return -ENOMEM;
		}
	}
	j->keys = j->data;
	j->values = (char *)j->data + key_bytes;
	memcpy(j->keys, keys, key_bytes);
	memcpy(j->values, values, value_bytes);
	j->seq = seq;
	j->fd = fd;
	j->count = count;
	j->key_size = count ? key_bytes / count : 0;
	j->value_size = count ? value_bytes / count : 0;
	j->elem_flags = elem_flags;

	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

/*
 * Blocks until every queued job has run (or been discarded). Returns 0, or
 * the first failure's return value (-errno) with out[0] = its seq and
 * out[1] = the elements it processed; the writer is then ready for new jobs.
 */
int kpr_writer_wait(struct kpr_writer *w, uint32_t *out)
{
	pthread_mutex_lock(&w->mu);
	while (w->head || w->running)
		pthread_cond_wait(&w->idle, &w->mu);
	int err = w->err;
	out[0] = w->err_seq;
	out[1] = w->err_processed;
	w->err = 0;
	drop_spares(w);
	pthread_mutex_unlock(&w->mu);
	return err;
}

/* Runs what is queued, then ends the thread and frees the writer. */
void kpr_writer_free(struct kpr_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	drop_spares(w);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

/*
 * The conntrack sweep's delete (agent/datapath/ct-sweeper.ts): of `count`
 * keys a batch read found expired, deletes those whose value is still
 * expired at `now`. A new flow may have taken such a key since the read (a
 * client reusing its port, a SNAT tuple given again), and a delete by key
 * would remove it: the flow loses one of its two entries. The value is
 * looked up again first (a live one is left alone), then taken out and
 * checked in one call (BPF_MAP_LOOKUP_AND_DELETE_ELEM, hash maps since
 * 5.14): a live value the datapath wrote between the two calls goes back
 * unless the key has been written again since (BPF_NOEXIST), so the sweep
 * never deletes a live flow's entry for good. Kernels before 5.14 answer
 * ENOTSUPP: there the delete by key stays, with its window of one syscall.
 * Runs on the caller's thread: here only so the syscalls per key cost no
 * call through koffi each.
 * Returns the number deleted, or -errno of the first failure other than a
 * key already gone.
 */
#define KPR_SWEEP_VALUE_MAX 256

/* Once the kernel has answered that it cannot take out a hash map entry with its value. */
static int kpr_no_lookup_and_delete;

int64_t kpr_ct_delete_still_expired(int fd, const void *keys, uint32_t key_size, uint32_t count,
				    uint32_t value_size, uint32_t expires_off, uint64_t now)
{
	unsigned char value[KPR_SWEEP_VALUE_MAX];
	int64_t deleted = 0;

	if (value_size > sizeof(value) || expires_off + sizeof(uint64_t) > value_size)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++) {
		const unsigned char *key = (const unsigned char *)keys + (size_t)i * key_size;
		uint64_t expires;
		int ret = bpf_map_lookup_elem(fd, key, value);

		if (ret == -ENOENT)
			continue;
		if (ret < 0)
			return ret;
		memcpy(&expires, value + expires_off, sizeof(expires));
		if (expires > now)
			continue;
		ret = -KPR_ENOTSUPP;
		if (!__atomic_load_n(&kpr_no_lookup_and_delete, __ATOMIC_RELAXED))
			ret = bpf_map_lookup_and_delete_elem(fd, key, value);
		if (ret == -KPR_ENOTSUPP || ret == -EOPNOTSUPP) {
			__atomic_store_n(&kpr_no_lookup_and_delete, 1, __ATOMIC_RELAXED);
			ret = bpf_map_delete_elem(fd, key);
		} else if (ret == 0) {
			memcpy(&expires, value + expires_off, sizeof(expires));
			if (expires > now) {
				/* A new flow's entry, written since the lookup: back in place. */
				ret = bpf_map_update_elem(fd, key, value, BPF_NOEXIST);
				if (ret < 0 && ret != -EEXIST)
					return ret;
				continue;
			}
		}
		if (ret == -ENOENT)
			continue;
		if (ret < 0)
			return ret;
		deleted++;
	}
	return deleted;
}
