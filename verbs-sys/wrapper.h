/* Input to bindgen: the rdma-core headers that verbs-sys binds.
 * Regenerate with scripts/gen-verbs-bindings.sh. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
