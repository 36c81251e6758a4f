/* test_algos.c: the log-depth algorithms and the tuner.
 *
 * Pure parts first, without ranks: the binomial tree covers every rank once with the
 * right parent; the recursive-doubling fold pairs ranks and numbers the rest in rank order;
 * Bruck steps move n-1 blocks in all; WEFT_ALGO parses in NCCL_ALGO's grammar; the model
 * picks a log-depth algorithm for 8 B and a bandwidth one for 64 MiB.
 *
 * Then each algorithm forced with WEFT_ALGO (set in the parent, so the forked ranks inherit
 * it) on real rank processes: 1, 2, 3, 4, 5, 7, 8 ranks over shm and 3 and 4 over socket,
 * counts 0, 1, 2, 3, 7, 4097 and one larger, int8 / uint8 / int32 / int64 / fp16 / bf16 /
 * fp32 / fp64, every op, in place and out of place, every root. Values are small integers
 * so results are exact in every datatype (as in test_collectives.c), guard bytes catch
 * writes outside buffers, and results all ranks share must hash equal on every rank. A last
 * check all-reduces random floats, where the reduction order shows in the bits: every rank
 * must still hold the same bits, close to the fp64 sum.
 *
 * The hierarchical all-reduce runs on emulated hosts: each rank sets WEFT_HOSTID from a
 * layout string before init (ranks with the same letter share memory, the others use
 * sockets), over 2x2, 3x2, hosts of 1, 2 and 3 ranks, one host of 4, interleaved hosts and
 * more; counts below 16 KiB take its fold-to-one-rank variant, larger ones its block
 * rings. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algos/hier.h"
#include "algos/patterns.h"
#include "lib/comm.h"
#include "lib/cpu_key.h"
#include "mem/guarded.h"
#include "mem/kernels.h"
#include "lib/select.h"
#include "transports/transport.h"
#include "topo/topo.h"
#include "tests/harness.h"

#define FILL_BYTE 0xEE

/* ---- pure pattern maths ----------------------------------------------------------------- */

/* lib/algo.h's bit scans against their definitions (smallest k with 2^k >= n; largest
 * power of two <= n), from below 1 to past 2^20 and at the edges of int. */
static void ceil_log2_and_pow2_floor_match_their_definitions(void **state) {
  (void)state;
  int edges[] = {0x3fffffff, 0x40000000, 0x40000001, 0x7ffffffe, 0x7fffffff};
  for (long long i = -3; i < (1 << 20) + 5 + 5; i++) {
    int n = i < (1 << 20) + 5 ? (int)i : edges[i - ((1 << 20) + 5)];
    int k = 0, p = 1;
    while ((1LL << k) < n) k++;
    while ((long long)p * 2 <= n) p *= 2;
    assert_int_equal(weft__ceil_log2(n), k);
    if (n >= 1) assert_int_equal(weft__pow2_floor(n), p);
  }
}

static void binomial_tree_spans_every_rank_once(void **state) {
  (void)state;
  for (int n = 1; n <= 70; n++) {
    for (int root = 0; root < n; root += (n > 8 ? 7 : 1)) {
      int seen[70] = {0};
      seen[0] = 1; /* the root (virtual 0) */
      for (int v = 0; v < n; v++) {
        int nc = 0;
        for (int m = weft__binomial_farthest(v, n); m >= 1; m /= 2, nc++) {
          int c = v + m;
          assert_true(c > v && c < n);
          assert_int_equal(weft__binomial_parent(c), v);
          seen[c]++;
        }
        assert_int_equal(weft__binomial_nchildren(v, n), nc);
        assert_int_equal(weft__binomial_real(weft__binomial_vrank(v, root, n), root, n), v);
      }
      for (int v = 0; v < n; v++) assert_int_equal(seen[v], 1);
    }
  }
  /* The largest communicators: no offset past int (the root of 2^31 - 1 ranks has 31). */
  assert_int_equal(weft__binomial_farthest(0, 0x7fffffff), 0x40000000);
  assert_int_equal(weft__binomial_nchildren(0, 0x7fffffff), 31);
  assert_int_equal(weft__binomial_nchildren(0x40000000, 0x7fffffff), 30);
  assert_int_equal(weft__binomial_nchildren(0x7ffffffe, 0x7fffffff), 0);
  /* Laid over a ring order (a permutation; XOR for powers of two, else rotation): a
   * bijection of the ranks onto 0 .. n-1 with the root at 0, on every root. */
  for (int n = 1; n <= 70; n++) {
    int ring[70], ring_pos[70]; /* even ranks first, as ranks bound round-robin to 2 cores */
    for (int p = 0; p < n; p++) ring[p] = n % 2 ? 2 * p % n : p < n / 2 ? 2 * p : 2 * (p - n / 2) + 1;
    for (int p = 0; p < n; p++) ring_pos[ring[p]] = p;
    struct weft_comm c;
    memset(&c, 0, sizeof c);
    c.nranks = n;
    c.ring = ring;
    c.ring_pos = ring_pos;
    for (int root = 0; root < n; root++) {
      int hit[70] = {0};
      assert_int_equal(weft__binomial_ring_vrank(&c, root, root), 0);
      for (int r = 0; r < n; r++) {
        int v = weft__binomial_ring_vrank(&c, r, root);
        assert_true(v >= 0 && v < n);
        hit[v]++;
        assert_int_equal(weft__binomial_ring_real(&c, v, root), r);
      }
      for (int v = 0; v < n; v++) assert_int_equal(hit[v], 1);
    }
  }
}

static void fold_pairs_ranks_and_numbers_the_rest_in_order(void **state) {
  (void)state;
  for (int n = 1; n <= 70; n++) {
    int p2 = weft__pow2_floor(n), last = -1, count = 0;
    assert_true(p2 <= n && 2 * p2 > n);
    for (int r = 0; r < n; r++) {
      weft__rd_fold f = weft__rd_fold_of(r, n);
      if (f.partner >= 0) assert_int_equal(weft__rd_fold_of(f.partner, n).partner, r);
      if (f.newrank < 0) {
        assert_int_equal(f.partner, r - 1);
        continue;
      }
      assert_int_equal(f.newrank, last + 1); /* increasing in rank order */
      assert_int_equal(weft__rd_real(f.newrank, f.rem), r);
      last = f.newrank;
      count++;
    }
    assert_int_equal(count, p2);
  }
}

/* Both trees of the double binary tree span every rank, with consistent links. */
static void double_binary_trees_span_every_rank(void **state) {
  (void)state;
  for (int n = 1; n <= 70; n++)
    for (int k = 0; k < 2; k++) {
      int roots = 0, links = 0;
      for (int r = 0; r < n; r++) {
        weft__btree_node nd = weft__dtree_node(r, n, k);
        if (nd.parent < 0) roots++;
        else {
          weft__btree_node p = weft__dtree_node(nd.parent, n, k);
          assert_true(p.child[0] == r || p.child[1] == r);
        }
        for (int c = 0; c < 2; c++)
          if (nd.child[c] >= 0) {
            links++;
            assert_int_equal(weft__dtree_node(nd.child[c], n, k).parent, r);
          }
      }
      assert_int_equal(roots, 1);
      assert_int_equal(links, n - 1);
    }
}

static void bruck_steps_move_n_minus_one_blocks(void **state) {
  (void)state;
  for (int n = 1; n <= 70; n++) {
    int total = 0, L = weft__ceil_log2(n);
    for (int k = 0; k < L; k++) total += weft__bruck_blocks(n, k);
    assert_int_equal(total, n - 1);
  }
}

/* ---- WEFT_ALGO and the model ------------------------------------------------------------ */

static int candidate_index(weft__coll_t coll, const char *name) {
  const weft__algo *a[WEFT__SELECT_MAX_CANDIDATES];
  int k = weft__select_candidates(coll, a, WEFT__SELECT_MAX_CANDIDATES);
  for (int i = 0; i < k; i++)
    if (strcmp(a[i]->name, name) == 0) return i;
  return -1;
}

static const char *pick(const char *spec, weft__coll_t coll, int nranks, size_t bytes) {
  weft__algo_filter f;
  weft__algo_filter_parse(spec, &f);
  weft__select_input in = {.coll = coll, .nranks = nranks, .bytes = bytes, .transport = weft__transport_by_name("shm"),
                           .chunk_bytes = 512 * 1024};
  return weft__select_resolve(&in, &f, NULL, 0)->name;
}

/* The model's all-reduce over sockets for nhosts hosts of min_local .. max_local ranks. */
static const char *pick_hosts(int nranks, int nhosts, int min_local, int max_local, size_t bytes) {
  weft__select_input in = {.coll = WEFT__COLL_ALL_REDUCE, .nranks = nranks, .bytes = bytes,
                           .transport = weft__transport_by_name("socket"), .chunk_bytes = 512 * 1024,
                           .nhosts = nhosts, .min_local = min_local, .max_local = max_local,
                           .transport_in_host = weft__transport_by_name("shm")};
  return weft__select_resolve(&in, NULL, NULL, 0)->name;
}

static void weft_algo_parses_ncclalgo_grammar(void **state) {
  (void)state;
  weft__algo_filter f;
  assert_true(weft__algo_filter_parse("ring", &f));
  assert_int_equal(f.allowed[WEFT__COLL_ALL_REDUCE], 1u << candidate_index(WEFT__COLL_ALL_REDUCE, "ring"));
  assert_true(weft__algo_filter_parse("^ring", &f));
  assert_false(f.allowed[WEFT__COLL_ALL_REDUCE] & (1u << candidate_index(WEFT__COLL_ALL_REDUCE, "ring")));
  assert_true(weft__algo_filter_parse("allreduce:Recursive_Doubling;all_gather:bruck", &f));
  assert_string_equal(pick("allreduce:Recursive_Doubling;all_gather:bruck", WEFT__COLL_ALL_REDUCE, 4, 1 << 26),
                      "recursive_doubling");
  assert_string_equal(pick("allreduce:rabenseifner", WEFT__COLL_ALL_REDUCE, 4, 8), "rabenseifner");
  assert_string_equal(pick("allgather:bruck", WEFT__COLL_ALL_GATHER, 4, 1 << 26), "bruck");
  assert_string_equal(pick("bcast:binomial", WEFT__COLL_BROADCAST, 4, 1 << 26), "binomial");
  assert_string_equal(pick("^ring,recursive_doubling,tree", WEFT__COLL_ALL_REDUCE, 4, 8), "rabenseifner");
  assert_string_equal(pick("allreduce:tree", WEFT__COLL_ALL_REDUCE, 4, 1 << 30), "tree"); /* forced past its cap */
  /* A list that leaves a collective nothing keeps all its candidates. */
  assert_string_equal(pick("bruck", WEFT__COLL_ALL_REDUCE, 4, 8), pick("", WEFT__COLL_ALL_REDUCE, 4, 8));
  assert_false(weft__algo_filter_parse("allreduce:nosuch", &f));
  assert_false(weft__algo_filter_parse("nosuchcoll:ring", &f));
  assert_false(weft__algo_filter_parse("nosuch", &f));
  assert_true(weft__algo_filter_parse("", &f));
  assert_true(weft__algo_filter_parse(NULL, &f));
}

static void model_picks_log_depth_for_small_and_bandwidth_for_large(void **state) {
  (void)state;
  assert_string_equal(pick("", WEFT__COLL_ALL_REDUCE, 8, 8), "recursive_doubling");
  assert_string_equal(pick("", WEFT__COLL_ALL_REDUCE, 8, 64u << 20), "ring");
  assert_string_equal(pick("", WEFT__COLL_ALL_GATHER, 8, 8), "bruck");
  assert_string_equal(pick("", WEFT__COLL_ALL_GATHER, 2, 8), "bruck"); /* the ring's fixed cost */
  assert_string_equal(pick("", WEFT__COLL_ALL_GATHER, 8, 64u << 20), "ring");
  assert_string_equal(pick("", WEFT__COLL_BROADCAST, 8, 8), "binomial");
  assert_string_equal(pick("", WEFT__COLL_BROADCAST, 8, 64u << 20), "chain");
  assert_string_equal(pick("", WEFT__COLL_REDUCE, 8, 8), "binomial");
  assert_string_equal(pick("", WEFT__COLL_REDUCE, 8, 64u << 20), "chain");
  /* 2 and 3 ranks: one and two steps either way; the chain's fixed cost decides */
  assert_string_equal(pick("", WEFT__COLL_BROADCAST, 2, 8), "binomial");
  assert_string_equal(pick("", WEFT__COLL_BROADCAST, 2, 64u << 10), "binomial");
  assert_string_equal(pick("", WEFT__COLL_BROADCAST, 3, 64), "binomial");
  assert_string_equal(pick("", WEFT__COLL_REDUCE, 2, 8), "binomial");
  assert_string_equal(pick("", WEFT__COLL_BROADCAST, 2, 64u << 20), "chain"); /* past the tree's cap */
}

/* More ranks than cores: Bruck's dependent steps each wait for a rank to be scheduled. */
static void oversubscribed_small_all_to_all_takes_pairwise(void **state) {
  (void)state;
  weft__select_input in = {.coll = WEFT__COLL_ALL_TO_ALL, .nranks = 4, .bytes = 64,
                           .transport = weft__transport_by_name("shm"), .chunk_bytes = 512 * 1024};
  assert_string_equal(weft__select_resolve(&in, NULL, NULL, 0)->name, "bruck");
  in.oversubscribed = 1;
  assert_string_equal(weft__select_resolve(&in, NULL, NULL, 0)->name, "pairwise");
}

/* More ranks than cores over shm: the linear all-gather's exchanges wait for no forwarding
 * rank; with a core per rank, or over sockets, the ring (large) and Bruck (small) keep it. */
static void oversubscribed_all_gather_takes_linear(void **state) {
  (void)state;
  static const size_t sizes[] = {64, 64u << 10, 1u << 20, 16u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    weft__select_input in = {.coll = WEFT__COLL_ALL_GATHER, .nranks = 4, .bytes = sizes[i],
                             .transport = weft__transport_by_name("shm"), .chunk_bytes = 512 * 1024};
    if (sizes[i] == 64 || sizes[i] == 16u << 20)
      assert_string_equal(weft__select_resolve(&in, NULL, NULL, 0)->name, sizes[i] == 64 ? "bruck" : "ring");
    in.oversubscribed = 1;
    assert_string_equal(weft__select_resolve(&in, NULL, NULL, 0)->name, "linear");
    in.nranks = 3;
    assert_string_equal(weft__select_resolve(&in, NULL, NULL, 0)->name, "linear");
    in.transport = weft__transport_by_name("socket"); /* it lacks WAIT: measured slower there */
    in.caps = in.transport->caps;
    assert_string_not_equal(weft__select_resolve(&in, NULL, NULL, 0)->name, "linear");
  }
}

/* The all-reduce on nranks ranks of one host of cpu (NULL: the stored row), oversubscribed or not. */
static const char *pick_on_cpu(const char *cpu, int nranks, int oversubscribed, size_t bytes) {
  weft__select_input in = {.coll = WEFT__COLL_ALL_REDUCE, .nranks = nranks, .bytes = bytes,
                           .transport = weft__transport_by_name("shm"), .chunk_bytes = 512 * 1024,
                           .oversubscribed = oversubscribed, .cpu = cpu};
  return weft__select_resolve(&in, NULL, NULL, 0)->name;
}

/* Rabenseifner's steps cost what recursive doubling's do and its bytes what the ring's do
 * (algos/all_reduce/rabenseifner.c): on 4 and 8 ranks it runs medium messages, even with
 * more ranks than cores, where the older cost (steps twice, bytes 1.5 times) never picked
 * it; on 2 ranks it costs exactly the ring's and the ring keeps them. */
static void rabenseifner_takes_medium_all_reduce(void **state) {
  (void)state;
  for (int over = 0; over <= 1; over++) {
    assert_string_equal(pick_on_cpu(NULL, 4, over, 8), "recursive_doubling");
    assert_string_equal(pick_on_cpu(NULL, 4, over, 256u << 10), "rabenseifner");
    assert_string_equal(pick_on_cpu(NULL, 4, over, 1u << 20), "rabenseifner");
    assert_string_equal(pick_on_cpu(NULL, 8, over, 512u << 10), "rabenseifner");
    assert_string_equal(pick_on_cpu(NULL, 4, over, 2u << 20), "ring"); /* past its cap */
    for (size_t b = 8; b <= (1u << 20); b *= 2) assert_string_not_equal(pick_on_cpu(NULL, 2, over, b), "rabenseifner");
    assert_string_equal(pick_on_cpu(NULL, 2, over, 1u << 20), "ring");
  }
  /* 3 ranks fold one in and out, a whole buffer each way: never cheaper than the ring */
  for (size_t b = 8; b <= (1u << 20); b *= 2) assert_string_not_equal(pick_on_cpu(NULL, 3, 1, b), "rabenseifner");
}

static int same_row(const weft__transport_model *a, const weft__transport_model *b) {
  return a->alpha_us == b->alpha_us && a->beta_us == b->beta_us && a->gamma_us == b->gamma_us &&
         a->oversub_alpha == b->oversub_alpha && a->oversub_beta == b->oversub_beta;
}

/* A transport's row fitted to a CPU serves that CPU only, and WEFT_TUNER_MODEL overrides it. */
static void a_fitted_row_serves_its_cpu(void **state) {
  (void)state;
  const weft__transport *shm = weft__transport_by_name("shm"), *sock = weft__transport_by_name("socket");
  const char *intel = "GenuineIntel 6/167";
  weft__model_source from;
  const weft__transport_model *m = weft__select_model(shm, intel, &from);
  assert_int_equal(from, WEFT__MODEL_FITTED);
  assert_true(!same_row(m, &shm->model) && m->oversub_alpha < shm->model.oversub_alpha);
  assert_true(same_row(weft__select_model(shm, "AuthenticAMD 26/2", &from), &shm->model));
  assert_int_equal(from, WEFT__MODEL_STORED);
  assert_true(same_row(weft__select_model(shm, "GenuineIntel 6/207", &from), &shm->model));
  assert_true(same_row(weft__select_model(shm, NULL, &from), &shm->model));
  assert_true(same_row(weft__select_model(shm, "", &from), &shm->model));
  assert_true(same_row(weft__select_model(sock, intel, &from), &sock->model)); /* no socket row for it */
  assert_int_equal(from, WEFT__MODEL_STORED);
  /* The fitted row's choices: that VM's 4 ranks on 2 cores ran Rabenseifner at 64-128 KiB in
   * 17.8 and 32.7 us where the stored row's recursive doubling took 28.3 and 61.6. */
  assert_string_equal(pick_on_cpu(NULL, 4, 1, 128u << 10), "recursive_doubling");
  assert_string_equal(pick_on_cpu(intel, 4, 1, 64u << 10), "rabenseifner");
  assert_string_equal(pick_on_cpu(intel, 4, 1, 128u << 10), "rabenseifner");
  assert_string_equal(pick_on_cpu(intel, 4, 1, 16u << 10), "recursive_doubling");
  setenv("WEFT_TUNER_MODEL", "shm:1,2,3,4,5", 1);
  m = weft__select_model(shm, intel, &from);
  assert_int_equal(from, WEFT__MODEL_ENV);
  assert_true(m->alpha_us == 1 && m->oversub_beta == 5);
  assert_string_equal(pick_on_cpu(intel, 4, 1, 128u << 10), pick_on_cpu("", 4, 1, 128u << 10));
  unsetenv("WEFT_TUNER_MODEL");
  assert_int_equal((weft__select_model(shm, intel, &from), from), WEFT__MODEL_FITTED);
}

/* The key the fitted rows are found by names this CPU as /proc/cpuinfo does. */
static void the_cpu_key_reads_as_proc_cpuinfo(void **state) {
  (void)state;
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512], vendor[64] = "";
  int family = -1, model = -1;
  while (f != NULL && fgets(line, sizeof line, f) && (family < 0 || model < 0 || !vendor[0])) {
    if (!vendor[0]) sscanf(line, "vendor_id : %63s", vendor);
    if (family < 0) sscanf(line, "cpu family : %d", &family);
    if (model < 0) sscanf(line, "model : %d", &model);
  }
  if (f != NULL) fclose(f);
#if defined(__x86_64__) || defined(__i386__)
  if (!vendor[0] || family < 0 || model < 0) skip(); /* no /proc here */
  char want[128];
  snprintf(want, sizeof want, "%s %d/%d", vendor, family, model);
  assert_string_equal(weft__cpu_key(), want);
#else
  assert_string_equal(weft__cpu_key(), "");
#endif
}

static void model_picks_hierarchical_for_large_messages_on_several_hosts_of_several_ranks(void **state) {
  (void)state;
  static const size_t large[] = {1u << 20, 4u << 20, 64u << 20};
  for (size_t i = 0; i < 3; i++) {
    assert_string_equal(pick_hosts(4, 2, 2, 2, large[i]), "hierarchical");
    assert_string_equal(pick_hosts(8, 2, 4, 4, large[i]), "hierarchical");
    assert_string_equal(pick_hosts(6, 2, 3, 3, large[i]), "hierarchical");
    /* One rank per host, or one host: nothing to gain over the flat algorithms. */
    assert_string_not_equal(pick_hosts(4, 4, 1, 1, large[i]), "hierarchical");
    assert_string_not_equal(pick_hosts(4, 1, 4, 4, large[i]), "hierarchical");
    assert_string_not_equal(pick_hosts(4, 0, 0, 0, large[i]), "hierarchical");
  }
  /* Small messages stay with the log-depth algorithms. */
  assert_string_equal(pick_hosts(4, 2, 2, 2, 8), "recursive_doubling");
}

/* Host grouping: hosts in order of their lowest rank, local index in rank order. */
static void hier_grouping_orders_hosts_by_lowest_rank(void **state) {
  (void)state;
  static const char *layouts[] = {"0011", "0101", "011222", "2110", "0000", "0123"};
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    int n = (int)strlen(layouts[i]);
    weft__peer_info peers[8];
    memset(peers, 0, sizeof peers);
    for (int r = 0; r < n; r++) peers[r].host_hash = 1000 + (uint64_t)(layouts[i][r] - '0');
    weft__hier_shape sh = weft__hier_shape_of(peers, n);
    for (int r = 0; r < n; r++) {
      weft__hier h;
      int buf[2 * 8 + WEFT__HIER_MAX_HOSTS + 1];
      assert_int_equal(weft__hier_build(peers, n, r, &h, buf), 0);
      assert_int_equal(h.nhosts, sh.nhosts);
      assert_int_equal(h.min_local, sh.min_local);
      assert_int_equal(h.max_local, sh.max_local);
      assert_int_equal(h.host_ranks[h.local], r);
      assert_int_equal(weft__hier_rank(&h, h.host, h.local), r);
      assert_int_equal(weft__hier_count(&h, h.host), h.nlocal);
      for (int l = 1; l < h.nlocal; l++) assert_true(h.host_ranks[l - 1] < h.host_ranks[l]);
      int next = 0; /* hosts numbered in the order of their lowest rank */
      for (int p = 0; p < n; p++) {
        assert_true(h.host_of[p] <= next);
        if (h.host_of[p] == next) next++;
        assert_int_equal(h.host_of[p] == h.host, layouts[i][p] == layouts[i][r]);
      }
      assert_int_equal(next, h.nhosts);
    }
  }
  weft__peer_info peers[4] = {{0}};
  const char *l = "2110"; /* host "2" has rank 0, so it is host 0; "1" is host 1 */
  for (int r = 0; r < 4; r++) peers[r].host_hash = (uint64_t)l[r];
  weft__hier h;
  int buf[2 * 4 + WEFT__HIER_MAX_HOSTS + 1];
  weft__hier_build(peers, 4, 3, &h, buf);
  assert_int_equal(h.nhosts, 3);
  assert_int_equal(h.host, 2);
  weft__hier_build(peers, 4, 2, &h, buf);
  assert_int_equal(h.host, 1);
  assert_int_equal(h.local, 1);
  assert_int_equal(weft__hier_rank(&h, 0, 1), -1); /* host 0 has one rank */
  assert_int_equal(weft__hier_rank(&h, 1, 0), 1);
  /* Widths: one block per rank of the most crowded host for large messages, else 1. */
  assert_int_equal(weft__hier_width(3, 8), 1);
  assert_int_equal(weft__hier_width(3, 1 << 20), 3);
  assert_int_equal(weft__hier_width(1, 1 << 20), 1);
  assert_int_equal(weft__hier_width(64, 1 << 20), WEFT__HIER_MAX_WIDTH);
}

/* ---- values and references (exact in every datatype, see test_collectives.c) ---------- */

static long move_value(int src, size_t j) { return (long)(((size_t)src * 7 + j * 5 + 1) % 11); }
/* All-to-all: the block rank src sends to rank dst. */
static long a2a_value(int src, int dst, size_t j) {
  return (long)(((size_t)src * 7 + (size_t)dst * 3 + j * 5 + 1) % 11);
}

static void store_expected(void *p, size_t j, weft_datatype_t dt, weft_redop_t op, int n) {
  long acc = harness_red_value(op, dt, 0, j);
  for (int r = 1; r < n; r++) {
    long v = harness_red_value(op, dt, r, j);
    if (op == WEFT_SUM || op == WEFT_AVG) acc += v;
    else if (op == WEFT_PROD) acc *= v;
    else if (op == WEFT_MAX) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  if (op != WEFT_AVG) {
    harness_store(p, j, dt, acc);
    return;
  }
  float q = (float)acc / (float)n;
  switch (dt) {
  case WEFT_FLOAT16: ((uint16_t *)p)[j] = weft__float_to_half(q); break;
  case WEFT_BFLOAT16: ((uint16_t *)p)[j] = weft__float_to_bf16(q); break;
  case WEFT_FLOAT32: memcpy((float *)p + j, &q, sizeof q); break; /* p may be misaligned */
  case WEFT_FLOAT64: { double d = (double)acc / (double)n; memcpy((double *)p + j, &d, sizeof d); break; }
  default: harness_store(p, j, dt, acc / n); break;
  }
}

/* ---- one rank's sweep ------------------------------------------------------------------- */

typedef struct {
  const char *algo_env; /* WEFT_ALGO */
  int coll;             /* WEFT__COLL_* under test */
  int nranks;
  const char *transport;
} algo_case;

static const weft_datatype_t dts[] = {WEFT_INT8, WEFT_UINT8, WEFT_INT32, WEFT_INT64,
                                      WEFT_FLOAT16, WEFT_BFLOAT16, WEFT_FLOAT32, WEFT_FLOAT64};
static const weft_redop_t ops[] = {WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG};
static const size_t counts[] = {0, 1, 2, 3, 7, 4097, 70001};

static int check(harness_rank *r, const char *desc, const uint8_t *got, const uint8_t *want,
                 size_t count, weft_datatype_t dt) {
  size_t esz = harness_esize(dt);
  for (size_t i = 0; i < count; i++)
    if (memcmp(got + i * esz, want + i * esz, esz) != 0)
      return harness_fail(r, "%s: element %zu: got %.9g, expected %.9g", desc, i,
                          harness_load(got, i, dt), harness_load(want, i, dt));
  return 1;
}

static int ok(harness_rank *r, weft_status_t st, const char *desc) {
  if (st == WEFT_SUCCESS) return 1;
  return harness_fail(r, "%s: returned %s: \"%s\"", desc, harness_status_name(st),
                      weft_get_last_error(r->comm));
}

/* all_reduce or reduce (root >= 0) of one (dt, op, count, in-place); 0 after a failed call. */
static int run_reduction(harness_rank *r, int coll, weft_datatype_t dt, weft_redop_t op,
                         size_t count, int inplace, int root, uint64_t *hash) {
  size_t esz = harness_esize(dt), bytes = count * esz;
  uint8_t *send = harness_guarded_alloc(bytes, FILL_BYTE), *recv = harness_guarded_alloc(bytes, FILL_BYTE);
  uint8_t *want = malloc(bytes + 1);
  for (size_t j = 0; j < count; j++) {
    harness_store(inplace ? recv : send, j, dt, harness_red_value(op, dt, r->rank, j));
    store_expected(want, j, dt, op, r->nranks);
  }
  char desc[160];
  snprintf(desc, sizeof desc, "%s %s %s count %zu %s root %d", coll == WEFT__COLL_REDUCE ? "reduce" : "all_reduce",
           harness_dt_name(dt), harness_op_name(op), count, inplace ? "in-place" : "out-of-place", root);
  weft_status_t st = coll == WEFT__COLL_REDUCE
                         ? weft_reduce(inplace ? recv : send, recv, count, dt, op, root, r->comm, NULL)
                         : weft_all_reduce(inplace ? recv : send, recv, count, dt, op, r->comm, NULL);
  int good = ok(r, st, desc);
  if (good && (coll != WEFT__COLL_REDUCE || r->rank == root)) check(r, desc, recv, want, count, dt);
  if (good && coll != WEFT__COLL_REDUCE) *hash = harness_hash(recv, bytes, *hash);
  harness_guarded_check(r, send, bytes, desc);
  harness_guarded_check(r, recv, bytes, desc);
  harness_guarded_free(send);
  harness_guarded_free(recv);
  free(want);
  return good;
}

static int run_move(harness_rank *r, int coll, weft_datatype_t dt, size_t count, int inplace,
                    int root, uint64_t *hash) {
  int n = r->nranks;
  size_t esz = harness_esize(dt), in_bytes = count * esz;
  int a2a = coll == WEFT__COLL_ALL_TO_ALL;
  if (a2a) in_bytes *= (size_t)n;
  size_t out_bytes = coll == WEFT__COLL_ALL_GATHER ? (size_t)n * in_bytes : in_bytes;
  uint8_t *send = harness_guarded_alloc(in_bytes, FILL_BYTE), *recv = harness_guarded_alloc(out_bytes, FILL_BYTE);
  uint8_t *want = malloc(out_bytes + 1);
  const void *src = send;
  if (a2a) {
    uint8_t *mine = inplace ? recv : send;
    for (int p = 0; p < n; p++)
      for (size_t j = 0; j < count; j++) {
        harness_store(mine, (size_t)p * count + j, dt, a2a_value(r->rank, p, j));
        harness_store(want, (size_t)p * count + j, dt, a2a_value(p, r->rank, j));
      }
    src = mine;
  } else if (coll == WEFT__COLL_ALL_GATHER) {
    uint8_t *mine = inplace ? recv + (size_t)r->rank * in_bytes : send;
    for (size_t j = 0; j < count; j++) harness_store(mine, j, dt, move_value(r->rank, j));
    for (int p = 0; p < n; p++)
      for (size_t j = 0; j < count; j++) harness_store(want, (size_t)p * count + j, dt, move_value(p, j));
    src = mine;
  } else {
    for (size_t j = 0; j < count; j++) {
      harness_store(want, j, dt, move_value(root, j));
      if (r->rank == root) harness_store(inplace ? recv : send, j, dt, move_value(root, j));
    }
    if (inplace) src = recv;
  }
  char desc[160];
  snprintf(desc, sizeof desc, "%s %s count %zu %s root %d",
           a2a ? "all_to_all" : coll == WEFT__COLL_ALL_GATHER ? "all_gather" : "broadcast",
           harness_dt_name(dt), count, inplace ? "in-place" : "out-of-place", root);
  weft_status_t st = a2a ? weft_all_to_all(src, recv, count, dt, r->comm, NULL)
                     : coll == WEFT__COLL_ALL_GATHER ? weft_all_gather(src, recv, count, dt, r->comm, NULL)
                                                     : weft_broadcast(src, recv, count, dt, root, r->comm, NULL);
  int good = ok(r, st, desc);
  if (good) check(r, desc, recv, want, out_bytes / (esz ? esz : 1), dt);
  if (good && !a2a) *hash = harness_hash(recv, out_bytes, *hash);
  harness_guarded_check(r, send, in_bytes, desc);
  harness_guarded_check(r, recv, out_bytes, desc);
  harness_guarded_free(send);
  harness_guarded_free(recv);
  free(want);
  return good;
}

/* The large count only for a few datatypes, to keep the sweep in seconds. */
static int skip_large(size_t count, weft_datatype_t dt, weft_redop_t op) {
  return count > 5000 && !(dt == WEFT_FLOAT32 && op == WEFT_SUM) && !(dt == WEFT_BFLOAT16 && op == WEFT_AVG);
}

static int sweep_body(harness_rank *r) {
  const algo_case *c = r->arg;
  int reduction = c->coll == WEFT__COLL_ALL_REDUCE || c->coll == WEFT__COLL_REDUCE;
  int rooted = c->coll == WEFT__COLL_REDUCE || c->coll == WEFT__COLL_BROADCAST;
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
    uint64_t hash = 0;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
      size_t nops = reduction ? sizeof ops / sizeof ops[0] : 1;
      for (size_t o = 0; o < nops; o++) {
        if (skip_large(counts[ci], dts[d], reduction ? ops[o] : WEFT_SUM)) continue;
        for (int inplace = 0; inplace < 2; inplace++) {
          /* Every root for small counts, two roots for the others. */
          for (int root = 0; root < (rooted ? r->nranks : 1); root++) {
            if (rooted && counts[ci] > 3 && root != 0 && root != r->nranks - 1) continue;
            int good = reduction ? run_reduction(r, c->coll, dts[d], ops[o], counts[ci], inplace,
                                                 rooted ? root : -1, &hash)
                                 : run_move(r, c->coll, dts[d], counts[ci], inplace, root, &hash);
            if (!good) return r->failures;
          }
        }
      }
    }
    char desc[64];
    snprintf(desc, sizeof desc, "%s count %zu", c->algo_env, counts[ci]);
    if (c->coll != WEFT__COLL_REDUCE) harness_same_on_all_ranks(r, hash, desc);
  }
  return r->failures;
}

/* Random floats: the order of the reduction shows in the bits; every rank must agree. */
static int random_float_body(harness_rank *r) {
  const size_t count = 1031;
  float *buf = malloc(count * sizeof(float));
  uint16_t *half = malloc(count * sizeof(uint16_t));
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(r->rank + 1);
  for (size_t i = 0; i < count; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1e3f;
    half[i] = weft__float_to_bf16(buf[i] / 1e3f);
  }
  if (ok(r, weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), "random float32 sum"))
    harness_same_on_all_ranks(r, harness_hash(buf, count * sizeof(float), 0), "random float32 sum");
  if (ok(r, weft_all_reduce(half, half, count, WEFT_BFLOAT16, WEFT_AVG, r->comm, NULL), "random bf16 avg"))
    harness_same_on_all_ranks(r, harness_hash(half, count * sizeof(uint16_t), 0), "random bf16 avg");
  free(buf);
  free(half);
  return r->failures;
}

/* ---- hierarchical all-reduce over emulated hosts --------------------------------------- */
/* Ranks get WEFT_HOSTID from a layout string (the host of each rank), so ranks with the same
 * letter share memory and the others talk over sockets, as on separate machines. */
typedef struct {
  algo_case c;       /* first: sweep_body reads it */
  const char *hosts; /* host of rank r: hosts[r] */
  int random;        /* run the random-float check instead of the sweep */
} hier_case;

static int hier_body(harness_rank *r) {
  const hier_case *hc = r->arg;
  if (harness_init_on_emulated_host(r, hc->hosts)) return r->failures;
  return hc->random ? random_float_body(r) : sweep_body(r);
}

static void hierarchical_all_reduce_matches_reference_on_emulated_hosts(void **state) {
  (void)state;
  static const char *layouts[] = {"0011", "001122", "011222", "0000", "0101", "000111", "0112", "22110"};
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    for (int random = 0; random < 2; random++) {
      hier_case hc = {{"allreduce:hierarchical", WEFT__COLL_ALL_REDUCE, (int)strlen(layouts[i]), NULL},
                      layouts[i], random};
      setenv("WEFT_ALGO", hc.c.algo_env, 1);
      harness_opts o = {0};
      o.nranks = hc.c.nranks;
      o.no_init = 1;
      o.deadline_s = 60;
      harness_run(&o, hier_body, &hc);
      unsetenv("WEFT_ALGO");
    }
  }
}

static void run_case(const algo_case *c, harness_body_fn body) {
  setenv("WEFT_ALGO", c->algo_env, 1);
  harness_opts o = {0};
  o.nranks = c->nranks;
  o.transport = c->transport;
  o.deadline_s = 60;
  harness_run(&o, body, (void *)c);
  unsetenv("WEFT_ALGO");
}

static const struct {
  const char *env;
  int coll;
} algos[] = {
    {"allreduce:recursive_doubling", WEFT__COLL_ALL_REDUCE},
    {"allreduce:rabenseifner", WEFT__COLL_ALL_REDUCE},
    {"allreduce:tree", WEFT__COLL_ALL_REDUCE},
    {"allgather:bruck", WEFT__COLL_ALL_GATHER},
    {"alltoall:bruck", WEFT__COLL_ALL_TO_ALL},
    {"broadcast:binomial", WEFT__COLL_BROADCAST},
    {"reduce:binomial", WEFT__COLL_REDUCE},
    {"allgather:linear", WEFT__COLL_ALL_GATHER},
};

static void all_algorithms_match_the_reference_on_1_to_8_ranks(void **state) {
  int a = (int)(intptr_t)*state;
  static const int shm_ranks[] = {1, 2, 3, 4, 5, 7, 8};
  for (size_t i = 0; i < sizeof shm_ranks / sizeof shm_ranks[0]; i++) {
    algo_case c = {algos[a].env, algos[a].coll, shm_ranks[i], "shm"};
    run_case(&c, sweep_body);
  }
  for (int n = 3; n <= 4; n++) {
    algo_case c = {algos[a].env, algos[a].coll, n, "socket"};
    run_case(&c, sweep_body);
  }
}

static void random_floats_reduce_to_identical_bits_on_every_rank(void **state) {
  (void)state;
  static const char *envs[] = {"allreduce:recursive_doubling", "allreduce:rabenseifner", "allreduce:ring"};
  static const int ranks[] = {2, 5, 7}; /* a power of two, and folds */
  for (size_t e = 0; e < 3; e++)
    for (size_t i = 0; i < 3; i++) {
      algo_case c = {envs[e], WEFT__COLL_ALL_REDUCE, ranks[i], "shm"};
      run_case(&c, random_float_body);
    }
}

/* ---- the two-level all-gather, reduce-scatter and broadcast, and the topology's ring order */
/* Reduce-scatter of one (dt, op, count, in-place): block r of the reference is element
 * r * count + j of the all-reduce reference. */
static int run_reduce_scatter(harness_rank *r, weft_datatype_t dt, weft_redop_t op, size_t count, int inplace) {
  size_t esz = harness_esize(dt), n = (size_t)r->nranks, bytes = count * esz;
  uint8_t *send = harness_guarded_alloc(n * bytes, FILL_BYTE), *out = harness_guarded_alloc(bytes, FILL_BYTE);
  uint8_t *want = malloc(n * bytes + 1);
  for (size_t j = 0; j < n * count; j++) {
    harness_store(send, j, dt, harness_red_value(op, dt, r->rank, j));
    store_expected(want, j, dt, op, r->nranks);
  }
  uint8_t *recv = inplace ? send + (size_t)r->rank * bytes : out;
  char desc[160];
  snprintf(desc, sizeof desc, "reduce_scatter %s %s count %zu %s", harness_dt_name(dt), harness_op_name(op),
           count, inplace ? "in-place" : "out-of-place");
  int good = ok(r, weft_reduce_scatter(send, recv, count, dt, op, r->comm, NULL), desc);
  if (good) check(r, desc, recv, want + (size_t)r->rank * bytes, count, dt);
  harness_guarded_check(r, send, n * bytes, desc);
  harness_guarded_check(r, out, bytes, desc);
  harness_guarded_free(send);
  harness_guarded_free(out);
  free(want);
  return good;
}

static int rs_sweep_body(harness_rank *r);

/* WEFT_ALGO=reducescatter:recursive_doubling over the reduce-scatter sweep, folds included. */
static void reduce_scatter_recursive_doubling_matches_reference_on_1_to_8_ranks(void **state) {
  (void)state;
  static const int shm_ranks[] = {1, 2, 3, 4, 5, 7, 8};
  for (size_t i = 0; i < sizeof shm_ranks / sizeof shm_ranks[0]; i++) {
    algo_case c = {"reducescatter:recursive_doubling", WEFT__COLL_REDUCE_SCATTER, shm_ranks[i], "shm"};
    run_case(&c, rs_sweep_body);
  }
  algo_case c = {"reducescatter:recursive_doubling", WEFT__COLL_REDUCE_SCATTER, 3, "socket"};
  run_case(&c, rs_sweep_body);
}

static int rs_sweep_body(harness_rank *r) {
  static const size_t rs_counts[] = {0, 1, 3, 4097, 70001};
  for (size_t ci = 0; ci < sizeof rs_counts / sizeof rs_counts[0]; ci++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        if (skip_large(rs_counts[ci], dts[d], ops[o])) continue;
        for (int inplace = 0; inplace < 2; inplace++)
          if (!run_reduce_scatter(r, dts[d], ops[o], rs_counts[ci], inplace)) return r->failures;
      }
  return r->failures;
}

/* Init on the emulated host of hc->hosts, then the collective's sweep. */
static int hier_any_body(harness_rank *r) {
  const hier_case *hc = r->arg;
  if (harness_init_on_emulated_host(r, hc->hosts)) return r->failures;
  const char *name = "?";
  static const char *coll_names[] = {[WEFT__COLL_ALL_GATHER] = "all_gather", [WEFT__COLL_BROADCAST] = "broadcast",
                                     [WEFT__COLL_REDUCE_SCATTER] = "reduce_scatter", [WEFT__COLL_ALL_REDUCE] = "all_reduce",
                                     [WEFT__COLL_REDUCE] = "reduce"};
  weft_get_algorithm(r->comm, coll_names[hc->c.coll], 1 << 20, WEFT_FLOAT32, &name);
  const char *want = strchr(hc->c.algo_env, ':') + 1;
  if (strchr(want, ',') == NULL && strcmp(name, want) != 0)
    harness_fail(r, "%s on hosts %s: WEFT_ALGO=%s runs %s", coll_names[hc->c.coll], hc->hosts, hc->c.algo_env, name);
  return hc->c.coll == WEFT__COLL_REDUCE_SCATTER ? rs_sweep_body(r) : sweep_body(r);
}

static void run_hier_case(const char *env, int coll, const char *hosts) {
  hier_case hc = {{env, coll, (int)strlen(hosts), NULL}, hosts, 0};
  setenv("WEFT_ALGO", env, 1);
  harness_opts o = {0};
  o.nranks = hc.c.nranks;
  o.no_init = 1;
  o.deadline_s = 60;
  harness_run(&o, hier_any_body, &hc);
  unsetenv("WEFT_ALGO");
}

static void hierarchical_gather_scatter_broadcast_match_reference_on_emulated_hosts(void **state) {
  (void)state;
  /* 2x2, hosts of 1, 2 and 3 ranks, interleaved hosts, a lone host first, one host. */
  static const char *layouts[] = {"0011", "011222", "0101", "22110", "000"};
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    run_hier_case("allgather:hierarchical", WEFT__COLL_ALL_GATHER, layouts[i]);
    run_hier_case("reducescatter:hierarchical", WEFT__COLL_REDUCE_SCATTER, layouts[i]);
    run_hier_case("broadcast:hierarchical", WEFT__COLL_BROADCAST, layouts[i]);
  }
}

/* Ranks 0 and 2 on host A, 1 and 3 on host B: the ring keeps each host's ranks together
 * (0 2 1 3), and every ring and chain algorithm stays exact on it. */
static int ring_order_body(harness_rank *r) {
  const hier_case *hc = r->arg;
  char id[32];
  snprintf(id, sizeof id, "weft-test-host-%c", hc->hosts[r->rank]);
  setenv("WEFT_HOSTID", id, 1);
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  if (st != WEFT_SUCCESS) {
    r->comm = NULL;
    return harness_fail(r, "init on host %s: %s", id, harness_status_name(st));
  }
  static const int want[] = {0, 2, 1, 3};
  for (int p = 0; p < 4; p++) {
    if (r->comm->ring == NULL || r->comm->ring[p] != want[p])
      return harness_fail(r, "ring position %d holds rank %d, expected %d (hosts %s)", p,
                          r->comm->ring ? r->comm->ring[p] : p, want[p], hc->hosts);
    if (r->comm->ring_pos[want[p]] != p) return harness_fail(r, "ring_pos[%d] != %d", want[p], p);
  }
  if (r->comm->topo == NULL || r->comm->topo->nhosts != 2) return harness_fail(r, "topology: not 2 hosts");
  static const int colls[] = {WEFT__COLL_ALL_REDUCE, WEFT__COLL_ALL_GATHER, WEFT__COLL_BROADCAST, WEFT__COLL_REDUCE};
  for (int i = 0; i < 4; i++) {
    algo_case c = {hc->c.algo_env, colls[i], 4, NULL};
    r->arg = &c;
    sweep_body(r);
    r->arg = (void *)hc;
  }
  return rs_sweep_body(r);
}

static void ring_keeps_hosts_contiguous_and_stays_exact_on_interleaved_hosts(void **state) {
  (void)state;
  hier_case hc = {{"allreduce:ring;allgather:ring;reducescatter:ring;broadcast:chain;reduce:chain",
                   WEFT__COLL_ALL_REDUCE, 4, NULL}, "0101", 0};
  setenv("WEFT_ALGO", hc.c.algo_env, 1);
  harness_opts o = {0};
  o.nranks = 4;
  o.no_init = 1;
  o.deadline_s = 90;
  harness_run(&o, ring_order_body, &hc);
  unsetenv("WEFT_ALGO");
}

/* The binomial broadcast's and reduce's tree follows the ring order (algos/patterns.h): on
 * hosts 0101 (ring 0 2 1 3, virtual rank = ring position XOR the root's) only the root's
 * farthest child is on the other host, so one message crosses hosts per call whichever the
 * root. The broadcast's farthest child alone forwards (to its host's other rank); in the
 * reduce every rank but the root sends once, to its parent, and only that child's message
 * crosses. In rank order, from root 0, rank 2 forwarded to rank 3 (the reduce: rank 3 sent
 * to rank 2, rank 1 to rank 0), a second crossing, and with 4 ranks bound round-robin to 2
 * cores one core ran 4 of a broadcast's 6 sends and receives. Each rank checks its own
 * sends: the bytes its connections sent in the call just made (lib/req.h, op_bytes). */
static int binomial_tree_body(harness_rank *r) {
  static const char hosts[] = "0101";
  const int reduce = r->arg != NULL;
  if (harness_init_on_emulated_host(r, hosts)) return r->failures;
  static const int ring_pos[] = {0, 2, 1, 3};
  float buf[8], in[8];
  for (int root = 0; root < r->nranks; root++) {
    for (int j = 0; j < 8; j++) buf[j] = r->rank == root ? (float)(root * 10 + j) : -1.0f;
    for (int j = 0; j < 8; j++) in[j] = (float)(r->rank * 100 + j);
    char desc[64];
    snprintf(desc, sizeof desc, "%s of 32 B to root %d", reduce ? "reduce" : "broadcast", root);
    weft_status_t st = reduce ? weft_reduce(in, buf, 8, WEFT_FLOAT32, WEFT_SUM, root, r->comm, NULL)
                              : weft_broadcast(buf, buf, 8, WEFT_FLOAT32, root, r->comm, NULL);
    if (!ok(r, st, desc)) return r->failures;
    for (int j = 0; j < 8 && (!reduce || r->rank == root); j++) {
      float want = reduce ? (float)(600 + 4 * j) : (float)(root * 10 + j); /* sum of rank * 100 + j */
      if (buf[j] != want) return harness_fail(r, "%s: element %d is %g, expected %g", desc, j, buf[j], want);
    }
    int crossing = 0, sends = 0;
    for (int p = 0; p < r->nranks; p++) {
      const weft__conn *c = &r->comm->conns[p];
      if (p == r->rank || c->op_mark != r->comm->last_seq || c->op_bytes[WEFT__REQ_SEND] == 0) continue;
      sends++;
      crossing += hosts[p] != hosts[r->rank];
    }
    int v = ring_pos[r->rank] ^ ring_pos[root]; /* 0: the root, 2: its farthest child */
    int want_sends = reduce ? v != 0 : v == 0 ? 2 : v == 2, want_crossing = reduce ? v == 2 : v == 0;
    if (crossing != want_crossing || sends != want_sends)
      harness_fail(r, "%s: this rank sent to %d peers, %d on the other host; expected %d and %d (the tree "
                   "over ring order 0 2 1 3)", desc, sends, crossing, want_sends, want_crossing);
  }
  return r->failures;
}

static void binomial_broadcast_tree_follows_the_ring_order(void **state) {
  (void)state;
  setenv("WEFT_ALGO", "broadcast:binomial", 1);
  harness_opts o = {0};
  o.nranks = 4;
  o.no_init = 1;
  o.deadline_s = 60;
  harness_run(&o, binomial_tree_body, NULL);
  unsetenv("WEFT_ALGO");
}

static void binomial_reduce_tree_follows_the_ring_order(void **state) {
  (void)state;
  setenv("WEFT_ALGO", "reduce:binomial", 1);
  harness_opts o = {0};
  o.nranks = 4;
  o.no_init = 1;
  o.deadline_s = 60;
  harness_run(&o, binomial_tree_body, "reduce");
  unsetenv("WEFT_ALGO");
}

/* Creates r's communicator (the harness ran with no_init); 0 after a failed init. */
static int init_comm(harness_rank *r) {
  if (harness_expect_status(r, weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config),
                            WEFT_SUCCESS, "init"))
    return 1;
  r->comm = NULL;
  return 0;
}

/* The ring all-reduce keeps a large out-of-place call's partials in the communicator's
 * scratch only where receives honor non-temporal stores (WEFT__TRANSPORT_CAP_NT_LANDING:
 * shm); over sockets the kernel writes recvbuf itself, and the scratch only added a copy.
 * WEFT_NT_COPY_BYTES=1M makes a 1 MiB call large. */
static int ring_scratch_body(harness_rank *r) {
  const char *transport = r->arg;
  setenv("WEFT_NT_COPY_BYTES", "1M", 1);
  setenv("WEFT_ALGO", "allreduce:ring", 1);
  if (!init_comm(r)) return r->failures;
  size_t count = 1u << 18; /* 1 MiB of float32 */
  float *in = malloc(count * sizeof *in), *out = malloc(count * sizeof *out);
  for (size_t j = 0; j < count; j++) in[j] = (float)(r->rank + 1 + (int)(j % 7));
  if (ok(r, weft_all_reduce(in, out, count, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), "all_reduce 1 MiB out of place"))
    for (size_t j = 0; j < count; j++)
      if (out[j] != (float)(3 + 2 * (int)(j % 7))) {
        harness_fail(r, "all_reduce over %s: element %zu is %g, expected %d", transport, j, out[j], 3 + 2 * (int)(j % 7));
        break;
      }
  int want_scratch = strcmp(transport, "shm") == 0;
  if ((r->comm->scratch_bytes > 0) != want_scratch)
    harness_fail(r, "all_reduce over %s: the communicator's scratch holds %zu bytes; expected %s", transport,
                 r->comm->scratch_bytes, want_scratch ? "the partials there" : "none (the plain ring path)");
  free(in);
  free(out);
  return r->failures;
}

static void ring_all_reduce_keeps_partials_in_scratch_only_where_receives_honor_nt(void **state) {
  (void)state;
  static const char *transports[] = {"shm", "socket"};
  for (int i = 0; i < 2; i++) {
    harness_opts o = {.nranks = 2, .transport = transports[i], .no_init = 1, .deadline_s = 60};
    harness_run(&o, ring_scratch_body, (void *)transports[i]);
  }
}

/* The ring all-reduce over shm passes each piece of a receive that the next step sends on
 * into the FIFO slot going to the next rank as it lands (weft__req.fwd, NCCL's
 * recvReduceSend / recvCopySend), instead of after the whole message: out of place and
 * large (the partials in the scratch), reduced straight into the slot, the last one into
 * recvbuf too; in place, landed in recvbuf and copied on from there. The connections count
 * the bytes that went on so, per call. Hidden the SEND_SLOT capability
 * (WEFT_TRANSPORT_CAPS), none does and the results are the same. With a FIFO of 3 slots the
 * step-0 send and the forwarded pieces compete for room: pieces that find none land in
 * dst and the send carries them on from there (checked by the results; whether a given run
 * forwards part of a message depends on timing). WEFT_AVG forwards too, its division done
 * piece by piece by the last reduce-scatter receive (weft__req.avg_div): 2 ranks through the
 * fan-out or the slot, 3 in the scratch; the quotients must be the exact fp32 ones. */
typedef struct {
  const char *caps;   /* WEFT_TRANSPORT_CAPS, or NULL: every capability */
  const char *nslots; /* WEFT_SHM_NSLOTS, or NULL: the default FIFO */
  int want_forwarded; /* 1: some bytes of each form's calls must go on, 0: none may, -1: either */
  weft_redop_t op;    /* WEFT_SUM or WEFT_AVG */
} fwd_case;

static uint64_t forwarded_bytes(const harness_rank *r) {
  uint64_t sum = 0;
  for (int p = 0; p < r->nranks; p++) sum += r->comm->conns[p].fwd_bytes;
  return sum;
}

static int ring_forward_body(harness_rank *r) {
  const fwd_case *fc = r->arg;
  setenv("WEFT_NT_COPY_BYTES", "1M", 1);
  setenv("WEFT_ALGO", "allreduce:ring", 1);
  if (fc->caps != NULL) setenv("WEFT_TRANSPORT_CAPS", fc->caps, 1);
  if (fc->nslots != NULL) setenv("WEFT_SHM_NSLOTS", fc->nslots, 1);
  if (!init_comm(r)) return r->failures;
  size_t count = (3u << 19) + 5; /* 6 MiB of float32 and a ragged tail: 3+ slices of uneven blocks */
  float *in = malloc(count * sizeof *in), *out = malloc(count * sizeof *out);
  int n = r->nranks;
  uint64_t went[2] = {0, 0}; /* out of place, in place */
  for (int call = 0; call < 4 && r->failures == 0; call++) {
    int in_place = call % 2;
    for (size_t j = 0; j < count; j++) in[j] = (float)(r->rank + 1 + (int)(j % 7));
    memset(out, 0, count * sizeof *out);
    float *res = in_place ? in : out;
    uint64_t before = forwarded_bytes(r);
    if (!ok(r, weft_all_reduce(in, res, count, WEFT_FLOAT32, fc->op, r->comm, NULL), "all_reduce 6 MiB"))
      break;
    for (size_t j = 0; j < count; j++) {
      float want = (float)(n * (n + 1) / 2 + n * (int)(j % 7));
      if (fc->op == WEFT_AVG) want /= (float)n;
      if (res[j] != want) {
        harness_fail(r, "call %d (%s, %s): element %zu is %.9g, expected %.9g", call, weft__op_name(fc->op),
                     in_place ? "in place" : "out of place", j, res[j], want);
        break;
      }
    }
    went[in_place] += forwarded_bytes(r) - before;
  }
  for (int in_place = 0; in_place < 2 && r->failures == 0; in_place++)
    if (fc->want_forwarded >= 0 && (went[in_place] > 0) != fc->want_forwarded)
      harness_fail(r, "%s %s: %llu bytes went straight on to the next rank in 2 calls; expected %s",
                   weft__op_name(fc->op), in_place ? "in place" : "out of place", (unsigned long long)went[in_place],
                   fc->want_forwarded ? "some" : "none");
  free(in);
  free(out);
  return r->failures;
}

static void ring_all_reduce_forwards_pieces_as_they_land(void **state) {
  (void)state;
  static char no_send_slot[16];
  snprintf(no_send_slot, sizeof no_send_slot, "%u", WEFT__TRANSPORT_CAP_ALL & ~WEFT__TRANSPORT_CAP_SEND_SLOT);
  const fwd_case cases[] = {{NULL, NULL, 1, WEFT_SUM}, {no_send_slot, NULL, 0, WEFT_SUM}, {NULL, "3", -1, WEFT_SUM},
                            {NULL, NULL, 1, WEFT_AVG}, {NULL, "3", -1, WEFT_AVG}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int n = 2; n <= 3; n++) {
      harness_opts o = {.nranks = n, .transport = "shm", .no_init = 1, .deadline_s = 60};
      harness_run(&o, ring_forward_body, (void *)&cases[i]);
    }
}

/* The all-to-alls write the blocks they receive past the cache once the outputs of all the
 * host's ranks together reach WEFT_NT_COPY_BYTES (algos/ring.h: weft__host_nt_output), not
 * only when one message does. With the threshold at 1 MiB and 64 KiB blocks, 4 ranks'
 * outputs add up to 1 MiB (every block, the own one too, bypasses the cache) and 2 ranks'
 * to 256 KiB (none does). The buffers are guarded memory, which counts the bytes copied into
 * it with non-temporal stores; WEFT_SHM_CMA_BYTES=0 keeps the messages on two copies. */
static int a2a_nt_check(harness_rank *r, const char *what, const float *out, size_t block, size_t nt_bytes) {
  for (int p = 0; p < r->nranks; p++)
    for (size_t j = 0; j < block; j++) {
      float want = (float)(p * 4096 + r->rank * 256 + (int)(j % 251));
      if (out[(size_t)p * block + j] != want)
        return harness_fail(r, "%s: block %d element %zu is %g, expected %g", what, p, j, out[(size_t)p * block + j], want);
    }
  size_t all = (size_t)r->nranks * block * sizeof(float);
  if (r->nranks == 4 && nt_bytes < all)
    return harness_fail(r, "%s on 4 ranks: %zu of the %zu bytes received bypassed the cache; expected all", what,
                        nt_bytes, all);
  if (r->nranks == 2 && nt_bytes != 0)
    return harness_fail(r, "%s on 2 ranks: %zu bytes bypassed the cache; expected none (256 KiB on the host)", what,
                        nt_bytes);
  return 0;
}

static int a2a_nt_body(harness_rank *r) {
  setenv("WEFT_NT_COPY_BYTES", "1M", 1);
  setenv("WEFT_SHM_CMA_BYTES", "0", 1);
  setenv("WEFT_ALGO", "alltoall:pairwise", 1);
  if (!init_comm(r)) return r->failures;
  size_t block = 16384, total = (size_t)r->nranks * block, bytes = total * sizeof(float); /* 64 KiB blocks */
  void *in = NULL, *out = NULL;
  if (weft__mem_guarded.alloc(&weft__mem_guarded, bytes, &in) != WEFT_SUCCESS ||
      weft__mem_guarded.alloc(&weft__mem_guarded, bytes, &out) != WEFT_SUCCESS)
    return harness_fail(r, "guarded alloc of %zu bytes", bytes);
  float *src = weft__mem_guarded.host_view(&weft__mem_guarded, in, bytes);
  const float *dst = weft__mem_guarded.host_view(&weft__mem_guarded, out, bytes);
  for (int p = 0; p < r->nranks; p++)
    for (size_t j = 0; j < block; j++) src[(size_t)p * block + j] = (float)(r->rank * 4096 + p * 256 + (int)(j % 251));
  size_t before = weft__mem_guarded_nt_bytes();
  if (ok(r, weft_all_to_all(in, out, block, WEFT_FLOAT32, r->comm, NULL), "all_to_all 64 KiB blocks"))
    a2a_nt_check(r, "all_to_all", dst, block, weft__mem_guarded_nt_bytes() - before);
  size_t vcounts[4], vdispls[4];
  for (int p = 0; p < r->nranks; p++) vcounts[p] = block, vdispls[p] = (size_t)p * block;
  before = weft__mem_guarded_nt_bytes();
  if (ok(r, weft_all_to_allv(in, vcounts, vdispls, out, vcounts, vdispls, WEFT_FLOAT32, r->comm, NULL),
         "all_to_allv 64 KiB blocks"))
    a2a_nt_check(r, "all_to_allv", dst, block, weft__mem_guarded_nt_bytes() - before);
  weft__mem_guarded.free(&weft__mem_guarded, in);
  weft__mem_guarded.free(&weft__mem_guarded, out);
  return r->failures;
}

static void all_to_alls_bypass_the_cache_when_the_hosts_outputs_fill_it(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n += 2) {
    harness_opts o = {.nranks = n, .transport = "shm", .no_init = 1, .deadline_s = 60};
    harness_run(&o, a2a_nt_body, NULL);
  }
}

/* The ring all-gather writes the blocks it does not forward (its last step's and its own)
 * past the cache once the outputs of all the host's ranks together reach
 * WEFT_NT_COPY_BYTES, as the all-to-alls do, not only when one rank's output does. With the
 * threshold at 1 MiB: 2 ranks of 256 KiB blocks and 4 of 64 KiB put 1 MiB of output on the
 * host (the last step's block must bypass the cache); half those blocks, 512 KiB (none may). */
static int ag_nt_body(harness_rank *r) {
  setenv("WEFT_NT_COPY_BYTES", "1M", 1);
  setenv("WEFT_SHM_CMA_BYTES", "0", 1);
  setenv("WEFT_ALGO", "allgather:ring", 1);
  if (!init_comm(r)) return r->failures;
  size_t full = r->nranks == 2 ? 65536 : 16384; /* floats per block: 1 MiB of output on the host */
  size_t bytes = (size_t)r->nranks * full * sizeof(float);
  void *in = NULL, *out = NULL;
  if (weft__mem_guarded.alloc(&weft__mem_guarded, bytes, &in) != WEFT_SUCCESS ||
      weft__mem_guarded.alloc(&weft__mem_guarded, bytes, &out) != WEFT_SUCCESS)
    return harness_fail(r, "guarded alloc of %zu bytes", bytes);
  for (int half = 0; half < 2 && r->failures == 0; half++) {
    size_t block = half ? full / 2 : full;
    float *src = weft__mem_guarded.host_view(&weft__mem_guarded, in, block * sizeof(float));
    for (size_t j = 0; j < block; j++) src[j] = (float)(r->rank * 4096 + (int)(j % 251));
    size_t before = weft__mem_guarded_nt_bytes();
    if (!ok(r, weft_all_gather(in, out, block, WEFT_FLOAT32, r->comm, NULL), "all_gather")) break;
    size_t nt = weft__mem_guarded_nt_bytes() - before, host = (size_t)r->nranks * r->nranks * block * sizeof(float);
    const float *dst = weft__mem_guarded.host_view(&weft__mem_guarded, out, (size_t)r->nranks * block * sizeof(float));
    for (int p = 0; p < r->nranks && r->failures == 0; p++)
      for (size_t j = 0; j < block; j++)
        if (dst[(size_t)p * block + j] != (float)(p * 4096 + (int)(j % 251))) {
          harness_fail(r, "all_gather of %zu floats: block %d element %zu is %g", block, p, j,
                       dst[(size_t)p * block + j]);
          break;
        }
    if (!half && nt < block * sizeof(float))
      harness_fail(r, "all_gather on %d ranks, %zu bytes of output on the host: %zu bytes bypassed the cache; expected "
                   "at least the last step's %zu", r->nranks, host, nt, block * sizeof(float));
    if (half && nt != 0)
      harness_fail(r, "all_gather on %d ranks, %zu bytes of output on the host: %zu bytes bypassed the cache; expected "
                   "none", r->nranks, host, nt);
  }
  weft__mem_guarded.free(&weft__mem_guarded, in);
  weft__mem_guarded.free(&weft__mem_guarded, out);
  return r->failures;
}

static void ring_all_gather_bypasses_the_cache_when_the_hosts_outputs_fill_it(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n += 2) {
    harness_opts o = {.nranks = n, .transport = "shm", .no_init = 1, .deadline_s = 60};
    harness_run(&o, ag_nt_body, NULL);
  }
}

int main(void) {
  harness_filter_from_env();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ceil_log2_and_pow2_floor_match_their_definitions),
      cmocka_unit_test(binomial_tree_spans_every_rank_once),
      cmocka_unit_test(fold_pairs_ranks_and_numbers_the_rest_in_order),
      cmocka_unit_test(double_binary_trees_span_every_rank),
      cmocka_unit_test(bruck_steps_move_n_minus_one_blocks),
      cmocka_unit_test(weft_algo_parses_ncclalgo_grammar),
      cmocka_unit_test(model_picks_log_depth_for_small_and_bandwidth_for_large),
      cmocka_unit_test(rabenseifner_takes_medium_all_reduce),
      cmocka_unit_test(a_fitted_row_serves_its_cpu),
      cmocka_unit_test(the_cpu_key_reads_as_proc_cpuinfo),
      cmocka_unit_test(oversubscribed_small_all_to_all_takes_pairwise),
      cmocka_unit_test(oversubscribed_all_gather_takes_linear),
      cmocka_unit_test(model_picks_hierarchical_for_large_messages_on_several_hosts_of_several_ranks),
      cmocka_unit_test(hier_grouping_orders_hosts_by_lowest_rank),
      cmocka_unit_test(hierarchical_all_reduce_matches_reference_on_emulated_hosts),
      {"all_reduce_recursive_doubling_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)0},
      {"all_reduce_rabenseifner_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)1},
      {"all_reduce_tree_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)2},
      {"all_gather_bruck_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)3},
      {"all_to_all_bruck_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)4},
      {"broadcast_binomial_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)5},
      {"reduce_binomial_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)6},
      {"all_gather_linear_matches_reference_on_1_to_8_ranks",
       all_algorithms_match_the_reference_on_1_to_8_ranks, NULL, NULL, (void *)(intptr_t)7},
      cmocka_unit_test(reduce_scatter_recursive_doubling_matches_reference_on_1_to_8_ranks),
      cmocka_unit_test(random_floats_reduce_to_identical_bits_on_every_rank),
      cmocka_unit_test(hierarchical_gather_scatter_broadcast_match_reference_on_emulated_hosts),
      cmocka_unit_test(ring_keeps_hosts_contiguous_and_stays_exact_on_interleaved_hosts),
      cmocka_unit_test(binomial_broadcast_tree_follows_the_ring_order),
      cmocka_unit_test(binomial_reduce_tree_follows_the_ring_order),
      cmocka_unit_test(ring_all_reduce_keeps_partials_in_scratch_only_where_receives_honor_nt),
      cmocka_unit_test(ring_all_reduce_forwards_pieces_as_they_land),
      cmocka_unit_test(all_to_alls_bypass_the_cache_when_the_hosts_outputs_fill_it),
      cmocka_unit_test(ring_all_gather_bypasses_the_cache_when_the_hosts_outputs_fill_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
