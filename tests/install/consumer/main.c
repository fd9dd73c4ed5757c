/* A program outside the tree, built against an installed libacemq: the
 * headers, the library and the package files must all be where they say. */
#include <stdio.h>
#include <string.h>

#include <acemq/acemq.h>

int main(void)
{
    acemq_idem *store = NULL;
    if (acemq_idem_open(&store, "memory:", NULL) != 0) return 1;
    acemq_claim c;
    int first = acemq_idem_try_claim(store, "m-1", 3, NULL, &c);
    int confirmed = acemq_idem_confirm(store, "m-1", 3, c.token);
    int again = acemq_idem_try_claim(store, "m-1", 3, NULL, &c);
    acemq_idem_close(store);
    printf("acemq %s: %s, %s\n", acemq_version(), acemq_claim_status_name(first),
           acemq_claim_status_name(again));
    return first == ACEMQ_CLAIMED && confirmed == 0 && again == ACEMQ_ALREADY_CONFIRMED ? 0 : 1;
}
