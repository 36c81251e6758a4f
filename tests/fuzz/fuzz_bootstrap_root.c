/* fuzz_bootstrap_root.c: what the bootstrap root reads from the network: hellos of
 * connecting ranks, then their all-gather contributions and goodbyes (lib/bootstrap_root.c,
 * messages of lib/bootstrap_wire.h).
 *
 * The root's handlers are static, so this file includes bootstrap_root.c itself and drives
 * them as its poll loop would, without threads or TCP: the input is 1..MAX_CONN connections,
 * each a 2-byte little-endian length then that many bytes (cut at the input's end), which
 * are written into a socketpair whose writer then closes. Each connection joins the pending
 * list and its hello is read by read_pending, as the poll loop would; then every joined rank
 * gets on_rank_message, round after round, until the root is done (a closed connection fails the job) or MAX_ROUNDS. The root
 * knows the secret FUZZ_SECRET, which the seeds carry. */
/* The one non-static function is renamed here, so this copy never clashes with the
 * library's (which the link may pull in too). */
#define weft__bootstrap_root_start fuzz_unused_bootstrap_root_start
#include "lib/bootstrap_root.c"
#undef weft__bootstrap_root_start

#include <fcntl.h>
#include <sys/socket.h>

#include "tests/fuzz/fuzz.h"

#define MAX_CONN 6
#define MAX_ROUNDS 16
static const uint8_t fuzz_secret[16] = {'w', 'e', 'f', 't', '-', 'f', 'u', 'z',
                                        'z', '-', 's', 'e', 'c', 'r', 'e', 't'};

/* A connected socket whose peer sent bytes [p, p + len) and closed; -1 on failure. */
static int connection_with(const uint8_t *p, size_t len) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  /* Non-blocking, so a message larger than the socket buffer is cut, never waited on. */
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  while (len > 0) {
    ssize_t n = write(sv[1], p, len);
    if (n <= 0) break;
    p += n;
    len -= (size_t)n;
  }
  close(sv[1]);
  return sv[0];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  root_state *s = calloc(1, sizeof(*s));
  FUZZ_CHECK(s != NULL, "calloc");
  s->listen_fd = -1;
  s->reserve_fd = -1;
  s->host_rank = -1;
  s->join_deadline_ns = UINT64_MAX;
  memcpy(s->secret, fuzz_secret, sizeof s->secret);
  s->idle_deadline_ns = weft__deadline_after_ms(1000);
  /* Each connection goes through the pending list as an accepted one does; its hello is
   * read without waiting (the writer has closed, so each read gets bytes or the end). A
   * hello claiming any nranks up to WEFT__BS_MAX_RANKS must stay cheap (defect 5). */
  int nconn = 0;
  for (size_t off = 0; nconn < MAX_CONN && off + 2 <= size && !s->done; nconn++) {
    size_t len = (size_t)data[off] | (size_t)data[off + 1] << 8;
    off += 2;
    if (len > size - off) len = size - off;
    int fd = connection_with(data + off, len);
    off += len;
    if (fd < 0) continue;
    add_pending(s, fd);
    for (int k = 0; k < 4 && s->npending > 0; k++) read_pending(s, s->npending - 1);
    while (s->npending > 0) drop_pending(s, s->npending - 1);
  }
  for (int round = 0; round < MAX_ROUNDS && !s->done; round++) {
    int joined = 0;
    /* Over the allocated pages only: a hello may claim up to WEFT__BS_MAX_RANKS (2^24)
     * ranks, and a loop over every rank number made each input take ~12 ms. */
    FOR_EACH_SLOT(s, r, x) {
      if (s->done) break;
      if (x->state != SLOT_JOINED) continue;
      joined = 1;
      on_rank_message(s, r);
    }
    if (!joined) break;
  }
  FUZZ_CHECK(s->nranks >= 0 && s->njoined <= s->nranks, "joined ranks within nranks");
  /* As root_main ends. */
  while (s->npending > 0) drop_pending(s, s->npending - 1);
  FOR_EACH_SLOT(s, r, x) close_rank(x);
  for (int i = 0; s->pages != NULL && i < (s->nranks + PAGE_RANKS - 1) / PAGE_RANKS; i++) free(s->pages[i]);
  free(s->pages);
  free(s);
  return 0;
}
