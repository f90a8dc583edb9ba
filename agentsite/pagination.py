from rest_framework.pagination import LimitOffsetPagination as _Base


class LimitOffsetPagination(_Base):
    """`?limit=&offset=`; 50 by default, 200 at most."""

    default_limit = 50
    max_limit = 200
