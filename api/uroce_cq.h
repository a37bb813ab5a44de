/*
 * uroce's libfabric completion objects, usable from C and C++ without a whole
 * provider: completion queues (fi_cq(3)), counters (fi_cntr(3)) and event
 * queues (fi_eq(3)) that are real struct fid_cq / fid_cntr / fid_eq, so
 * libfabric's inline calls work on them as they are:
 *
 *   struct fi_cq_attr attr = { .size = 256, .format = FI_CQ_FORMAT_DATA,
 *                              .wait_obj = FI_WAIT_FD };
 *   struct fid_cq *cq;
 *   uroce_cq_open(&attr, &cq, NULL);
 *   uroce_cq_push_wc(cq, wcs, n);           // what the engine does
 *   fi_cq_read(cq, entries, 16);            // what the application does
 *   fi_close(&cq->fid);
 *
 * Every function returns a negative fabric errno (rdma/fi_errno.h) on
 * invalid arguments; none crashes on NULL or on a fid that is not uroce's.
 * The semantics, and where uroce chose among the man pages' options, are
 * documented in cq/fabric_cq.h, cq/counter.h, cq/event_queue.h and
 * cq/wait_object.h. In short: a full CQ applies back-pressure (the push
 * returns how many it took and nothing is lost); failed completions keep
 * their place and are read with fi_cq_readerr after fi_cq_read returns
 * -FI_EAVAIL; blocking calls on objects without a wait object, and other
 * operations an object does not have, return -FI_ENOSYS.
 */
#ifndef UROCE_API_UROCE_CQ_H_
#define UROCE_API_UROCE_CQ_H_

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_wc;

/* Open a CQ, counter or EQ. attr is checked against the man page (size 0 and
 * FI_CQ_FORMAT_UNSPEC mean defaults: 1024 entries, FI_CQ_FORMAT_CONTEXT).
 * context becomes fid.context. fi_close releases the object. */
int uroce_cq_open(const struct fi_cq_attr *attr, struct fid_cq **cq,
                  void *context);
int uroce_cntr_open(const struct fi_cntr_attr *attr, struct fid_cntr **cntr,
                    void *context);
int uroce_eq_open(const struct fi_eq_attr *attr, struct fid_eq **eq,
                  void *context);

/* Feed completions exactly as the engine does: from one thread at a time per
 * object, no lock, no allocation, no system call unless a reader waits.
 * Returns how many completions were taken, from the front of wc (a full CQ
 * takes fewer; a counter takes all), or a negative fabric errno. */
ssize_t uroce_cq_push_wc(struct fid_cq *cq, const struct ibv_wc *wc,
                         size_t count);
ssize_t uroce_cntr_push_wc(struct fid_cntr *cntr, const struct ibv_wc *wc,
                           size_t count);

/* Queue a control event (struct fi_eq_entry, struct fi_eq_cm_entry plus
 * connection data, ...) or an error event on an EQ, as a provider does; no
 * FI_WRITE needed. err_data is copied. Returns the bytes queued. */
ssize_t uroce_eq_write_event(struct fid_eq *eq, uint32_t event,
                             const void *buf, size_t len);
ssize_t uroce_eq_write_error(struct fid_eq *eq,
                             const struct fi_eq_err_entry *error);

/* Mark a CQ, counter or EQ as bound to (or no longer bound to) an endpoint.
 * fi_close returns -FI_EBUSY while bindings remain. Unbinding something not
 * bound returns -FI_EINVAL. Unbind only once the engine will not push to the
 * object again. */
int uroce_fid_bind_ep(struct fid *fid);
int uroce_fid_unbind_ep(struct fid *fid);

/* fi_trywait for one CQ, counter or EQ (fi_poll(3)): 0 if the caller may now
 * block on the object's native wait object (the fd or mutex/cond from
 * FI_GETWAIT), -FI_EAGAIN if something is ready to read first, -FI_EINVAL if
 * the object has no native wait object. With FI_WAIT_MUTEX_COND, call it
 * holding the mutex, then pthread_cond_wait. */
int uroce_trywait(struct fid *fid);

#ifdef __cplusplus
}
#endif

#endif /* UROCE_API_UROCE_CQ_H_ */
